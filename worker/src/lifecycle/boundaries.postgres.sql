-- A group of stage boundaries in one statement (PostgreSQL): `$1` is a JSON array with one
-- object per boundary (see `batch.rs`). Every write below hangs off "fenced", the rows
-- that still carry their own lease token, are still in the stage their worker ran and
-- whose grant holds: a boundary whose row is not among them writes nothing at all.
-- The markers in braces are rules this crate states once, filled in before the statement
-- is first used (`row::postgres_statement`): the grant, the creator's webhook endpoints
-- and the delivery status tests.
WITH "input" AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(CAST($1 AS jsonb)) AS b(
        "id" uuid, "token" uuid, "from_stage" text, "stage" text, "cost" jsonb, "now" bigint,
        "lease_expires_at" bigint, "complete" boolean, "event_id" uuid, "event_key" text,
        "event_payload" jsonb, "partials" jsonb, "trace" jsonb)
),
-- The group's rows locked in id order, before any is written: two groups that share rows
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
        "heartbeat_at" = CASE WHEN b."complete" THEN j."heartbeat_at" ELSE b."now" END,
        "completed_at" = CASE WHEN b."complete" THEN b."now" ELSE j."completed_at" END,
        "retry_at" = CASE WHEN b."complete" THEN NULL ELSE j."retry_at" END,
        "error" = CASE WHEN b."complete" THEN NULL ELSE j."error" END,
        "worker_id" = CASE WHEN b."complete" THEN NULL ELSE j."worker_id" END,
        "lease_token" = CASE WHEN b."complete" THEN NULL ELSE j."lease_token" END,
        "row_version" = j."row_version" + 1,
        "updated_at" = GREATEST(j."updated_at", b."now")
    FROM "input" AS b
    -- (Ids as an array: the primary key finds each row whatever the planner's statistics
    -- say, and every row is locked above before the first is written.)
    WHERE j."id" = ANY (ARRAY(SELECT "id" FROM "locked"))
      AND j."id" = b."id"
      AND j."lease_token" = b."token"
      AND j."stage" = b."from_stage"
      AND {GRANT_HOLDS}
    RETURNING j.*
),
-- Journal sequences continue from the last one written: every other writer of a job's
-- journals replaces its lease token first, so no row of "fenced" can have gained one
-- since this statement's snapshot. Keys written before (a replay) are skipped and the
-- rest numbered without a gap; a clash on a sequence fails the group (nothing is lost).
-- (Each check is a scalar subquery, which the planner runs per row on the job's own
-- index: without statistics it turned EXISTS into a hash of the whole table.)
"partials" AS (
    INSERT INTO "research_task_partial_results"
        ("id", "tenant_id", "knowledge_space_id", "research_task_job_id", "sequence", "idempotency_key",
         "evidence_bundle", "created_at")
    SELECT CAST(p."item" ->> 'id' AS uuid), f."tenant_id", f."knowledge_space_id", f."id",
           "last"."sequence" + row_number() OVER (PARTITION BY f."id" ORDER BY p."position"),
           p."item" ->> 'key', p."item" -> 'bundle', b."now"
    FROM "fenced" AS f
    JOIN "input" AS b ON b."id" = f."id"
    CROSS JOIN LATERAL jsonb_array_elements(b."partials") WITH ORDINALITY AS p("item", "position")
    CROSS JOIN LATERAL (
        SELECT COALESCE(MAX(r."sequence"), 0) AS "sequence"
        FROM "research_task_partial_results" AS r WHERE r."research_task_job_id" = f."id"
    ) AS "last"
    WHERE (SELECT r."sequence" FROM "research_task_partial_results" AS r
           WHERE r."research_task_job_id" = f."id" AND r."idempotency_key" = p."item" ->> 'key') IS NULL
    RETURNING "research_task_job_id", "sequence"
),
"events" AS (
    INSERT INTO "research_task_progress_events"
        ("id", "tenant_id", "knowledge_space_id", "research_task_job_id", "sequence", "idempotency_key",
         "event_type", "stage", "payload", "created_at")
    SELECT b."event_id", f."tenant_id", f."knowledge_space_id", f."id",
           COALESCE((SELECT MAX(e."sequence") FROM "research_task_progress_events" AS e
                     WHERE e."research_task_job_id" = f."id"), 0) + 1,
           b."event_key", 'research_task.stage_changed', b."stage", b."event_payload", b."now"
    FROM "fenced" AS f
    JOIN "input" AS b ON b."id" = f."id"
    -- One event per boundary: a key written before inserts nothing.
    ON CONFLICT ("research_task_job_id", "idempotency_key") DO NOTHING
    RETURNING "research_task_job_id", "sequence"
),
-- Completions: the answer trace bound to the task's subject and grant, the draft set to
-- the answer (kept in its generation when it was the answer's start, as `draft::finish_in`
-- decides), and the task's open deliveries completed with any publisher's lock released.
"traces" AS (
    INSERT INTO "answer_traces"
        ("id", "tenant_id", "knowledge_space_id", "research_task_id", "query", "answer", "evidence", "created_at",
         "subject_id", "permission_snapshot_id", "permission_snapshot_revision", "access_channel")
    SELECT CAST(b."trace" ->> 'id' AS uuid), f."tenant_id", f."knowledge_space_id", f."id", f."query",
           b."trace" ->> 'answer', b."trace" -> 'evidence', b."now",
           f."subject_id", f."permission_snapshot_id", f."permission_snapshot_revision", f."access_channel"
    FROM "fenced" AS f
    JOIN "input" AS b ON b."id" = f."id"
    WHERE b."complete"
    RETURNING "research_task_id"
),
"drafts" AS (
    INSERT INTO "research_task_answer_drafts" AS d
        ("research_task_job_id", "tenant_id", "generation", "answer", "char_count", "updated_at")
    SELECT f."id", f."tenant_id", 1, b."trace" ->> 'answer', CAST(b."trace" ->> 'char_count' AS integer), b."now"
    FROM "fenced" AS f
    JOIN "input" AS b ON b."id" = f."id"
    WHERE b."complete"
    ON CONFLICT ("research_task_job_id") DO UPDATE SET
        "generation" = CASE WHEN substr(excluded."answer", 1, length(d."answer")) = d."answer"
                            THEN d."generation" ELSE d."generation" + 1 END,
        "answer" = excluded."answer",
        "char_count" = excluded."char_count",
        "updated_at" = excluded."updated_at"
    RETURNING "research_task_job_id"
),
"closed" AS (
    UPDATE "research_task_outbox" AS o SET
        "status" = 'completed', "lock_token" = NULL, "locked_by" = NULL, "locked_until" = NULL,
        "updated_at" = b."now"
    FROM "fenced" AS f
    JOIN "input" AS b ON b."id" = f."id"
    -- (A status test no index serves: the job's own index finds its few rows whatever the
    -- planner's statistics say; see `delivery::move_unlocked`.)
    WHERE b."complete" AND o."research_task_job_id" = f."id"
      AND {DELIVERY_OPEN}
    RETURNING o."research_task_job_id"
)
SELECT f.*,
       COALESCE(ev."sequence", (SELECT e."sequence" FROM "research_task_progress_events" AS e
                                WHERE e."research_task_job_id" = f."id" AND e."idempotency_key" = b."event_key"))
           AS "event_sequence",
       ev."sequence" IS NOT NULL AS "event_new",
       GREATEST(
           (SELECT MAX(p."sequence") FROM "partials" AS p WHERE p."research_task_job_id" = f."id"),
           (SELECT MAX((SELECT r."sequence" FROM "research_task_partial_results" AS r
                        WHERE r."research_task_job_id" = f."id" AND r."idempotency_key" = x ->> 'key'))
            FROM jsonb_array_elements(b."partials") AS x)
       ) AS "partial_sequence",
       {ANY_ENDPOINT} AS "any_endpoint"
FROM "fenced" AS f
JOIN "input" AS b ON b."id" = f."id"
LEFT JOIN "events" AS ev ON ev."research_task_job_id" = f."id"
