       FROM (SELECT "job"."permission_snapshot_id" AS "snapshot_id", CAST($4 AS bigint) AS "now") AS "grant_of") IS NULL
