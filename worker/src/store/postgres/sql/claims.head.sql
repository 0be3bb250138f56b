-- Leases in one statement (PostgreSQL). `$1` is a JSON array with one object per task,
-- each a row this transaction already locked (`FOR UPDATE SKIP LOCKED`) and the lifecycle
-- decided to lease (see `store::claims`): its new token, worker, stage, lease expiry, time
-- and, when it starts now, its `started` event. `$2` lists the outbox statuses a claim
-- marks, `$3` the status it marks them with.
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
-- The `started` events; each job's row lock (held since its row was chosen) keeps its
-- sequence the last one plus one.
"started" AS (
    INSERT INTO "research_task_progress_events"
        ("id", "tenant_id", "knowledge_space_id", "research_task_job_id", "sequence", "idempotency_key",
         "event_type", "stage", "payload", "created_at")
    SELECT CAST(c."started" ->> 'id' AS uuid), l."tenant_id", l."knowledge_space_id", l."id",
           COALESCE((SELECT MAX(e."sequence") FROM "research_task_progress_events" AS e
                     WHERE e."research_task_job_id" = l."id"), 0) + 1,
           c."started" ->> 'key', c."started" ->> 'event_type', l."stage", c."started" -> 'payload', c."now"
    FROM "leased" AS l
    JOIN "input" AS c ON c."id" = l."id"
    WHERE c."started" IS NOT NULL
    ON CONFLICT ("research_task_job_id", "idempotency_key") DO NOTHING
    RETURNING "research_task_job_id", "sequence"
),
"marked" AS (
    UPDATE "research_task_outbox" AS o SET
        "status" = $3, "lock_token" = NULL, "locked_by" = NULL, "locked_until" = NULL, "updated_at" = c."now"
    FROM "leased" AS l
    JOIN "input" AS c ON c."id" = l."id"
    -- (A status test no index serves: the job's own index finds its few rows; see
    -- `store::outbox`.)
    WHERE o."research_task_job_id" = l."id"
      AND (o."status" || '') = ANY (CAST($2 AS text[]))
    RETURNING o."research_task_job_id"
)
SELECT "job".*,
       CASE WHEN c."started" IS NULL THEN NULL
            ELSE COALESCE(s."sequence", (SELECT e."sequence" FROM "research_task_progress_events" AS e
                                         WHERE e."research_task_job_id" = "job"."id"
                                           AND e."idempotency_key" = c."started" ->> 'key'))
       END AS "started_sequence",
       s."sequence" IS NOT NULL AS "started_new",
       -- Whether the task's creator has an enabled webhook endpoint (any_endpoint.sql follows).
