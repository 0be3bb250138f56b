-- Nanodollars the tenant's (first parameter) tasks created at or after the second have spent.
SELECT CAST(SUM(json_extract("cost", '$.usd_nanos')) AS INTEGER) AS "nanos"
FROM "research_task_jobs"
WHERE "tenant_id" = ? AND "created_at" >= ?
