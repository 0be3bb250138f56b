    FROM (SELECT "job"."permission_snapshot_id" AS "snapshot_id", ?2 AS "now") AS "grant_of")
    AS "denial"
FROM "research_task_jobs" AS "job"
WHERE "job"."id" = ?1
