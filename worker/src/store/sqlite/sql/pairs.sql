-- Every (tenant, space) with unfinished tasks, in order: a skip scan over the partial
-- index of unfinished tasks, one probe per pair, never a read of the backlog itself.
-- SQLite's planner, without statistics, prefers the lease index for the stage test
-- and sorts the whole backlog: the partial index is named.
-- (The stage list is the partial index's own predicate, `migration::UNFINISHED`.)
WITH RECURSIVE "pairs" ("t", "s") AS (
    SELECT * FROM (SELECT "tenant_id", "knowledge_space_id" FROM "research_task_jobs" INDEXED BY "research_task_jobs_unfinished_idx"
                   WHERE "stage" IN ('queued', 'planning', 'retrieving', 'analyzing', 'generating', 'paused')
                   ORDER BY "tenant_id", "knowledge_space_id" LIMIT 1) AS "first"
    UNION ALL
    -- The next space of this tenant, else the first space of the next tenant.
    SELECT CASE WHEN (SELECT "knowledge_space_id" FROM "research_task_jobs" INDEXED BY "research_task_jobs_unfinished_idx"
                 WHERE "stage" IN ('queued', 'planning', 'retrieving', 'analyzing', 'generating', 'paused')
                   AND "tenant_id" = "pairs"."t" AND "knowledge_space_id" > "pairs"."s"
                 ORDER BY "knowledge_space_id" LIMIT 1) IS NOT NULL
                THEN "pairs"."t"
                ELSE (SELECT "tenant_id" FROM "research_task_jobs" INDEXED BY "research_task_jobs_unfinished_idx"
                 WHERE "stage" IN ('queued', 'planning', 'retrieving', 'analyzing', 'generating', 'paused') AND "tenant_id" > "pairs"."t"
                 ORDER BY "tenant_id" LIMIT 1) END,
           COALESCE((SELECT "knowledge_space_id" FROM "research_task_jobs" INDEXED BY "research_task_jobs_unfinished_idx"
                 WHERE "stage" IN ('queued', 'planning', 'retrieving', 'analyzing', 'generating', 'paused')
                   AND "tenant_id" = "pairs"."t" AND "knowledge_space_id" > "pairs"."s"
                 ORDER BY "knowledge_space_id" LIMIT 1),
                    (SELECT "knowledge_space_id" FROM "research_task_jobs" INDEXED BY "research_task_jobs_unfinished_idx"
                     WHERE "stage" IN ('queued', 'planning', 'retrieving', 'analyzing', 'generating', 'paused') AND "tenant_id" = (SELECT "tenant_id" FROM "research_task_jobs" INDEXED BY "research_task_jobs_unfinished_idx"
                 WHERE "stage" IN ('queued', 'planning', 'retrieving', 'analyzing', 'generating', 'paused') AND "tenant_id" > "pairs"."t"
                 ORDER BY "tenant_id" LIMIT 1)
                     ORDER BY "knowledge_space_id" LIMIT 1))
    FROM "pairs" WHERE "pairs"."t" IS NOT NULL
)
SELECT "t" AS "tenant_id", "s" AS "knowledge_space_id" FROM "pairs" WHERE "t" IS NOT NULL
