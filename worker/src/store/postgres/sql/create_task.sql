-- A new task with its grant, its trace context (when there is one) and its first outbox
-- entry, in one statement (PostgreSQL). `$1` holds the rows as the lifecycle decided them,
-- one JSON object per table ("snapshot", "task", "context", "outbox"), each with every
-- column by name: `jsonb_populate_record` reads them with the table's own column types.
-- Returns the task's id.
WITH "input" AS MATERIALIZED (SELECT CAST($1 AS jsonb) AS "rows"),
"snapshot" AS (
    INSERT INTO "knowledge_space_permission_snapshots"
    SELECT r.* FROM "input", jsonb_populate_record(NULL::"knowledge_space_permission_snapshots", "rows" -> 'snapshot') AS r
    RETURNING "id"
),
"task" AS (
    INSERT INTO "research_task_jobs"
    SELECT r.* FROM "input", jsonb_populate_record(NULL::"research_task_jobs", "rows" -> 'task') AS r
    -- (Through the snapshot, so the task's foreign key finds its grant in this statement.)
    WHERE EXISTS (SELECT 1 FROM "snapshot")
    RETURNING "id"
),
"context" AS (
    INSERT INTO "research_task_trace_contexts"
    SELECT r.* FROM "input", "task", jsonb_populate_record(NULL::"research_task_trace_contexts", "rows" -> 'context') AS r
    WHERE "rows" -> 'context' <> 'null'::jsonb
    RETURNING "research_task_job_id"
),
"outbox" AS (
    INSERT INTO "research_task_outbox"
    SELECT r.* FROM "input", "task", jsonb_populate_record(NULL::"research_task_outbox", "rows" -> 'outbox') AS r
    RETURNING "id"
)
SELECT "task"."id", (SELECT COUNT(*) FROM "outbox") AS "entries", (SELECT COUNT(*) FROM "context") AS "contexts"
FROM "task"
