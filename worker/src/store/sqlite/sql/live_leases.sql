-- The live leases of a tenant's tasks (parameters: now, the tenant), read through the
-- lease index from the running stages' live leases only.
-- (SQLite's planner, without statistics, picks the tenant's index, which walks its whole backlog: the lease index is named.)
SELECT COUNT(*) AS "n" FROM "research_task_jobs" INDEXED BY "research_task_jobs_lease_idx"
WHERE "stage" IN ('planning', 'retrieving', 'analyzing', 'generating')
  AND "lease_expires_at" > ? AND "lease_token" IS NOT NULL
  AND "tenant_id" = ?
