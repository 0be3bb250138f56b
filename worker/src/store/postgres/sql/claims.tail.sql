        FROM (SELECT "job"."permission_snapshot_id" AS "snapshot_id", c."now" AS "now") AS "grant_of") AS "denial"
FROM "leased" AS "job"
JOIN "input" AS c ON c."id" = "job"."id"
LEFT JOIN "started" AS s ON s."research_task_job_id" = "job"."id"
