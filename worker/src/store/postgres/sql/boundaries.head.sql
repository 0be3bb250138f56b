-- A batch of stage boundaries in one statement (PostgreSQL). `$1` is a JSON array with one
-- object per boundary (see `store::boundaries`): its fence (id, token, from_stage), what it
-- writes (stage, cost, lease_expires_at, the event, partial results, for a completion the
-- answer trace) and its time. `$2` lists the outbox statuses still open, `$3` the status a
-- completion closes them with. Every write below hangs off "fenced", the rows that still
-- carry their own lease token, are still in the stage their worker ran and whose grant
-- holds: a boundary whose row is not among them writes nothing at all.
WITH "input" AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(CAST($1 AS jsonb)) AS b(
        "id" uuid, "token" uuid, "from_stage" text, "stage" text, "cost" jsonb, "now" bigint,
        "lease_expires_at" bigint, "event_id" uuid, "event_type" text, "event_key" text,
        "event_payload" jsonb, "partials" jsonb, "trace" jsonb)
),
-- The batch's rows locked in id order, before any is written: two batches that share rows
-- (a stale worker's and its successor's) take them in the same order, so neither waits
-- for the other while holding a row it wants.
"locked" AS MATERIALIZED (
    SELECT j."id" FROM "research_task_jobs" AS j
    WHERE j."id" = ANY (ARRAY(SELECT "id" FROM "input"))
    ORDER BY j."id"
    FOR UPDATE
),
"fenced" AS (
    UPDATE "research_task_jobs" AS j SET
        "stage" = b."stage",
        "cost" = b."cost",
        "lease_expires_at" = b."lease_expires_at",
        "heartbeat_at" = CASE WHEN b."trace" IS NULL THEN b."now" ELSE j."heartbeat_at" END,
        "completed_at" = CASE WHEN b."trace" IS NULL THEN j."completed_at" ELSE b."now" END,
        "retry_at" = CASE WHEN b."trace" IS NULL THEN j."retry_at" END,
        "error" = CASE WHEN b."trace" IS NULL THEN j."error" END,
        "worker_id" = CASE WHEN b."trace" IS NULL THEN j."worker_id" END,
        "lease_token" = CASE WHEN b."trace" IS NULL THEN j."lease_token" END,
        "row_version" = j."row_version" + 1,
        "updated_at" = GREATEST(j."updated_at", b."now")
    FROM "input" AS b
    -- (Ids as an array: the primary key finds each row whatever the planner's statistics
    -- say, and every row is locked above before the first is written.)
    WHERE j."id" = ANY (ARRAY(SELECT "id" FROM "locked"))
      AND j."id" = b."id"
      AND j."lease_token" = b."token"
      AND j."stage" = b."from_stage"
      -- The grant at the boundary's own time (grant_denial.sql follows this piece).
      AND (SELECT
