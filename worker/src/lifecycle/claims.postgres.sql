-- A chunk of claims in one statement (PostgreSQL): `$1` is a JSON array with one object
-- per job, each already locked by this transaction (`FOR UPDATE SKIP LOCKED`), due, with
-- attempts left and not paused (see `claim_many.rs`). Each row gets its own lease; a job
-- claimed from `queued` moves to its first stage and gets its `started` event; the job's
-- open delivery becomes `leased`, with any publisher's lock released.
-- The markers in braces are rules this crate states once, filled in before the statement
-- is first used (`row::postgres_statement`): the grant, the creator's webhook endpoints
-- and the delivery status tests.
WITH "input" AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(CAST($1 AS jsonb)) AS c(
        "id" uuid, "token" uuid, "worker_id" text, "stage" text, "lease_expires_at" bigint, "now" bigint,
        "started" jsonb)
),
"leased" AS (
    UPDATE "research_task_jobs" AS j SET
        "stage" = c."stage",
        "worker_id" = c."worker_id",
        "lease_token" = c."token",
        "lease_expires_at" = c."lease_expires_at",
        "heartbeat_at" = c."now",
        "retry_at" = NULL,
        "execution_attempts" = j."execution_attempts" + 1,
        "row_version" = j."row_version" + 1,
        "updated_at" = GREATEST(j."updated_at", c."now")
    FROM "input" AS c
    -- (Ids as an array: the primary key finds each row whatever the planner's statistics say.)
    WHERE j."id" = ANY (ARRAY(SELECT "id" FROM "input"))
      AND j."id" = c."id"
    RETURNING j.*
),
-- The first claim's event; the job's row lock (held since the rows were chosen) keeps its
-- sequence the last one plus one.
"started" AS (
    INSERT INTO "research_task_progress_events"
        ("id", "tenant_id", "knowledge_space_id", "research_task_job_id", "sequence", "idempotency_key",
         "event_type", "stage", "payload", "created_at")
    SELECT CAST(c."started" ->> 'id' AS uuid), l."tenant_id", l."knowledge_space_id", l."id",
           COALESCE((SELECT MAX(e."sequence") FROM "research_task_progress_events" AS e
                     WHERE e."research_task_job_id" = l."id"), 0) + 1,
           'started', 'research_task.started', l."stage", c."started" -> 'payload', c."now"
    FROM "leased" AS l
    JOIN "input" AS c ON c."id" = l."id"
    WHERE c."started" IS NOT NULL
    ON CONFLICT ("research_task_job_id", "idempotency_key") DO NOTHING
    RETURNING "research_task_job_id", "sequence"
),
"delivered" AS (
    UPDATE "research_task_outbox" AS o SET
        "status" = 'leased', "lock_token" = NULL, "locked_by" = NULL, "locked_until" = NULL, "updated_at" = c."now"
    FROM "leased" AS l
    JOIN "input" AS c ON c."id" = l."id"
    -- (A status test no index serves, as in `delivery::move_unlocked`.)
    WHERE o."research_task_job_id" = l."id"
      AND {DELIVERY_UNLEASED}
    RETURNING o."research_task_job_id"
)
SELECT l.*,
       CASE WHEN c."started" IS NULL THEN NULL
            ELSE COALESCE(s."sequence", (SELECT e."sequence" FROM "research_task_progress_events" AS e
                                         WHERE e."research_task_job_id" = l."id" AND e."idempotency_key" = 'started'))
       END AS "started_sequence",
       s."sequence" IS NOT NULL AS "started_new",
       {ANY_ENDPOINT} AS "any_endpoint",
       -- The grant, checked here so the run need not ask again before its first stage.
       {GRANT_HOLDS} AS "grant_holds"
FROM "leased" AS l
JOIN "input" AS c ON c."id" = l."id"
LEFT JOIN "started" AS s ON s."research_task_job_id" = l."id"
