          FROM (SELECT j."permission_snapshot_id" AS "snapshot_id", b."now" AS "now") AS "grant_of") IS NULL
    RETURNING j.*
),
-- Journal sequences continue from the last one written: every other writer of a job's
-- journals replaces its lease token first, so no row of "fenced" can have gained one
-- since this statement's snapshot. Keys written before (a replay) are skipped and the
-- rest numbered without a gap; a clash on a sequence fails the batch (nothing is lost).
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
           b."event_key", b."event_type", b."stage", b."event_payload", b."now"
    FROM "fenced" AS f
    JOIN "input" AS b ON b."id" = f."id"
    -- One event per boundary: a key written before inserts nothing.
    ON CONFLICT ("research_task_job_id", "idempotency_key") DO NOTHING
    RETURNING "research_task_job_id", "sequence"
),
-- Completions: the answer trace bound to the task's subject and grant, the draft set to
-- the answer (kept in its generation when it was the answer's start, so subscribers only
-- receive the rest; the next generation otherwise), and the task's open outbox entries
-- closed with any publisher's lock released.
"traces" AS (
    INSERT INTO "answer_traces"
        ("id", "tenant_id", "knowledge_space_id", "research_task_id", "query", "answer", "evidence", "created_at",
         "subject_id", "permission_snapshot_id", "permission_snapshot_revision", "access_channel")
    SELECT CAST(b."trace" ->> 'id' AS uuid), f."tenant_id", f."knowledge_space_id", f."id", f."query",
           b."trace" ->> 'answer', b."trace" -> 'evidence', b."now",
           f."subject_id", f."permission_snapshot_id", f."permission_snapshot_revision", f."access_channel"
    FROM "fenced" AS f
    JOIN "input" AS b ON b."id" = f."id"
    WHERE b."trace" IS NOT NULL
    RETURNING "research_task_id"
),
"checks" AS (
    INSERT INTO "answer_trace_citation_checks" ("answer_trace_id", "checks", "citations", "created_at")
    SELECT CAST(b."trace" ->> 'id' AS uuid), b."trace" -> 'checks', b."trace" -> 'citations', b."now"
    FROM "fenced" AS f
    JOIN "input" AS b ON b."id" = f."id"
    WHERE b."trace" IS NOT NULL
      AND (jsonb_array_length(b."trace" -> 'checks') > 0 OR jsonb_array_length(b."trace" -> 'citations') > 0)
    RETURNING "answer_trace_id"
),
"drafts" AS (
    INSERT INTO "research_task_answer_drafts" AS d
        ("research_task_job_id", "tenant_id", "generation", "answer", "char_count", "updated_at")
    SELECT f."id", f."tenant_id", 1, b."trace" ->> 'answer', char_length(b."trace" ->> 'answer'), b."now"
    FROM "fenced" AS f
    JOIN "input" AS b ON b."id" = f."id"
    WHERE b."trace" IS NOT NULL
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
        "status" = $3, "lock_token" = NULL, "locked_by" = NULL, "locked_until" = NULL, "updated_at" = b."now"
    FROM "fenced" AS f
    JOIN "input" AS b ON b."id" = f."id"
    -- (A status test no index serves: the job's own index finds its few rows whatever the
    -- planner's statistics say; see `store::outbox`.)
    WHERE b."trace" IS NOT NULL AND o."research_task_job_id" = f."id"
      AND (o."status" || '') = ANY (CAST($2 AS text[]))
    RETURNING o."research_task_job_id"
)
SELECT "job".*,
       COALESCE(ev."sequence", (SELECT e."sequence" FROM "research_task_progress_events" AS e
                                WHERE e."research_task_job_id" = "job"."id" AND e."idempotency_key" = b."event_key"))
           AS "event_sequence",
       ev."sequence" IS NOT NULL AS "event_new",
       -- Whether the task's creator has an enabled webhook endpoint (any_endpoint.sql follows).
