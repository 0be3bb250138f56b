-- The live leases of a tenant's tasks (parameters: now, the tenant), read through the
-- lease index from the running stages' live leases only.

SELECT COUNT(*) AS "n" FROM "research_task_jobs"
WHERE "stage" IN ('planning', 'retrieving', 'analyzing', 'generating')
  AND "lease_expires_at" > $1 AND "lease_token" IS NOT NULL
  AND "tenant_id" = $2
