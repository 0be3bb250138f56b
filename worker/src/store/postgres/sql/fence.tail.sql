    FROM (SELECT "job"."permission_snapshot_id" AS "snapshot_id", CAST($2 AS bigint) AS "now") AS "grant_of")
    AS "denial"
FROM "research_task_jobs" AS "job"
WHERE "job"."id" = $1
FOR UPDATE OF "job"
