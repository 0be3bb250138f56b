-- Nanodollars the tenant's (`$1`) tasks created at or after `$2` have spent.
SELECT CAST(SUM(CAST("cost" ->> 'usd_nanos' AS bigint)) AS bigint) AS "nanos"
FROM "research_task_jobs"
WHERE "tenant_id" = $1 AND "created_at" >= $2
