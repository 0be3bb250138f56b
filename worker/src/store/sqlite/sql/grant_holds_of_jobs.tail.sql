 FROM (SELECT "research_task_jobs"."permission_snapshot_id" AS "snapshot_id", CAST(? AS INTEGER) AS "now") AS "grant_of") IS NULL
