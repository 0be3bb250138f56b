-- SQLite counterpart of the seed (0015_research_task_jobs.postgres.sql): the same tables,
-- constraints and index names; UUIDs as sqlx stores them, JSONB as text that must be valid
-- JSON. Every statement is IF NOT EXISTS, so a replay changes nothing.
CREATE UNIQUE INDEX IF NOT EXISTS "knowledge_space_permission_snapshots_provenance_uq"
  ON "knowledge_space_permission_snapshots" ("tenant_id", "knowledge_space_id", "id", "subject_id", "access_channel");
CREATE UNIQUE INDEX IF NOT EXISTS "knowledge_space_permission_snapshots_trace_provenance_uq"
  ON "knowledge_space_permission_snapshots" ("knowledge_space_id", "id", "subject_id", "access_channel");
CREATE UNIQUE INDEX IF NOT EXISTS "knowledge_space_permission_snapshots_space_id_uq"
  ON "knowledge_space_permission_snapshots" ("knowledge_space_id", "id");
CREATE INDEX IF NOT EXISTS "knowledge_space_permission_snapshots_api_key_idx"
  ON "knowledge_space_permission_snapshots" ("tenant_id", "knowledge_space_id", "api_key_id", "api_key_revision");
CREATE INDEX IF NOT EXISTS "answer_traces_space_subject_created_idx"
  ON "answer_traces" ("knowledge_space_id", "subject_id", "created_at", "id");

CREATE TABLE IF NOT EXISTS "research_task_jobs" (
  "id" uuid_text PRIMARY KEY NOT NULL,
  "tenant_id" VARCHAR(255) NOT NULL,
  "knowledge_space_id" uuid_text NOT NULL,
  "subject_id" VARCHAR(255) NOT NULL,
  "permission_snapshot_id" uuid_text NOT NULL,
  "permission_snapshot_revision" INTEGER NOT NULL,
  "access_channel" VARCHAR(16) NOT NULL,
  "query" TEXT NOT NULL,
  "mode" VARCHAR(16),
  "top_k" INTEGER,
  "budget_usd" double,
  "limits" jsonb_text NOT NULL CHECK (json_valid("limits")),
  "metadata" jsonb_text NOT NULL CHECK (json_valid("metadata")),
  "cost" jsonb_text NOT NULL CHECK (json_valid("cost")),
  "stage" VARCHAR(16) NOT NULL,
  "paused_from_stage" VARCHAR(16),
  "queue_job_id" VARCHAR(255),
  "error" TEXT,
  "resume_after" BIGINT,
  "paused_at" BIGINT,
  "completed_at" BIGINT,
  "row_version" INTEGER NOT NULL,
  "execution_attempts" INTEGER NOT NULL,
  "max_execution_attempts" INTEGER NOT NULL,
  "worker_id" VARCHAR(255),
  "lease_token" uuid_text,
  "lease_expires_at" BIGINT,
  "heartbeat_at" BIGINT,
  "retry_at" BIGINT,
  "created_at" BIGINT NOT NULL,
  "updated_at" BIGINT NOT NULL,
  CONSTRAINT "research_task_jobs_stage_ck" CHECK (
    "stage" IN (
      'queued', 'planning', 'retrieving', 'analyzing', 'generating',
      'paused', 'completed', 'failed', 'canceled'
    )
  ),
  CONSTRAINT "research_task_jobs_mode_ck"
    CHECK ("mode" IS NULL OR "mode" IN ('auto', 'fast', 'research', 'deep')),
  CONSTRAINT "research_task_jobs_channel_ck"
    CHECK ("access_channel" IN ('interactive', 'service_api', 'mcp', 'agent')),
  CONSTRAINT "research_task_jobs_positive_ck" CHECK (
    "permission_snapshot_revision" >= 1
    AND "row_version" >= 1
    AND "execution_attempts" >= 0
    AND "max_execution_attempts" >= 1
    AND ("top_k" IS NULL OR "top_k" >= 1)
    AND ("budget_usd" IS NULL OR "budget_usd" >= 0)
  ),
  CONSTRAINT "research_task_jobs_lease_ck" CHECK (
    ("lease_token" IS NULL AND "worker_id" IS NULL AND "lease_expires_at" IS NULL)
    OR ("lease_token" IS NOT NULL AND "worker_id" IS NOT NULL AND "lease_expires_at" IS NOT NULL)
  ),
  FOREIGN KEY ("tenant_id", "knowledge_space_id")
    REFERENCES "knowledge_spaces" ("tenant_id", "id") ON DELETE CASCADE,
  FOREIGN KEY (
    "tenant_id", "knowledge_space_id", "permission_snapshot_id", "subject_id", "access_channel"
  )
    REFERENCES "knowledge_space_permission_snapshots" (
      "tenant_id", "knowledge_space_id", "id", "subject_id", "access_channel"
    ) ON DELETE RESTRICT
);

CREATE INDEX IF NOT EXISTS "research_task_jobs_scope_updated_idx"
  ON "research_task_jobs" (
    "tenant_id", "knowledge_space_id", "updated_at", "id"
  );
CREATE INDEX IF NOT EXISTS "research_task_jobs_queue_idx"
  ON "research_task_jobs" ("queue_job_id", "id");
CREATE INDEX IF NOT EXISTS "research_task_jobs_lease_idx"
  ON "research_task_jobs" ("stage", "lease_expires_at", "retry_at", "id");
CREATE UNIQUE INDEX IF NOT EXISTS "research_task_jobs_scope_id_uq"
  ON "research_task_jobs" ("tenant_id", "knowledge_space_id", "id");

CREATE TABLE IF NOT EXISTS "research_task_outbox" (
  "id" uuid_text PRIMARY KEY NOT NULL,
  "research_task_job_id" uuid_text NOT NULL,
  "delivery_revision" INTEGER NOT NULL,
  "event_type" VARCHAR(32) NOT NULL,
  "schema_version" INTEGER NOT NULL,
  "idempotency_key" VARCHAR(512) NOT NULL,
  "payload" jsonb_text NOT NULL CHECK (json_valid("payload")),
  "status" VARCHAR(16) NOT NULL,
  "available_at" BIGINT NOT NULL,
  "dispatch_attempts" INTEGER NOT NULL,
  "locked_by" VARCHAR(255),
  "locked_until" BIGINT,
  "lock_token" uuid_text,
  "queue_job_id" VARCHAR(255),
  "last_error" TEXT,
  "delivered_at" BIGINT,
  "created_at" BIGINT NOT NULL,
  "updated_at" BIGINT NOT NULL,
  CONSTRAINT "research_task_outbox_event_ck" CHECK ("event_type" = 'research.task'),
  CONSTRAINT "research_task_outbox_schema_ck" CHECK ("schema_version" = 1),
  CONSTRAINT "research_task_outbox_status_ck" CHECK (
    "status" IN ('pending', 'dispatching', 'dispatched', 'leased', 'completed', 'canceled', 'dead')
  ),
  CONSTRAINT "research_task_outbox_positive_ck" CHECK (
    "delivery_revision" >= 1 AND "dispatch_attempts" >= 0
  ),
  CONSTRAINT "research_task_outbox_lock_ck" CHECK (
    ("lock_token" IS NULL AND "locked_by" IS NULL AND "locked_until" IS NULL)
    OR ("lock_token" IS NOT NULL AND "locked_by" IS NOT NULL AND "locked_until" IS NOT NULL)
  ),
  FOREIGN KEY ("research_task_job_id") REFERENCES "research_task_jobs" ("id") ON DELETE CASCADE
);

CREATE UNIQUE INDEX IF NOT EXISTS "research_task_outbox_idempotency_uq"
  ON "research_task_outbox" ("idempotency_key");
CREATE UNIQUE INDEX IF NOT EXISTS "research_task_outbox_job_delivery_uq"
  ON "research_task_outbox" ("research_task_job_id", "delivery_revision");
CREATE INDEX IF NOT EXISTS "research_task_outbox_claim_idx"
  ON "research_task_outbox" ("status", "available_at", "locked_until", "id");

CREATE TABLE IF NOT EXISTS "research_task_partial_results" (
  "id" uuid_text PRIMARY KEY NOT NULL,
  "tenant_id" VARCHAR(255) NOT NULL,
  "knowledge_space_id" uuid_text NOT NULL,
  "research_task_job_id" uuid_text NOT NULL,
  "sequence" INTEGER NOT NULL,
  "idempotency_key" VARCHAR(512) NOT NULL,
  "evidence_bundle" jsonb_text NOT NULL CHECK (json_valid("evidence_bundle")),
  "created_at" BIGINT NOT NULL,
  FOREIGN KEY ("research_task_job_id") REFERENCES "research_task_jobs" ("id") ON DELETE CASCADE,
  FOREIGN KEY ("tenant_id", "knowledge_space_id")
    REFERENCES "knowledge_spaces" ("tenant_id", "id") ON DELETE CASCADE
);

CREATE UNIQUE INDEX IF NOT EXISTS "research_task_partials_job_sequence_uq"
  ON "research_task_partial_results" ("research_task_job_id", "sequence");
CREATE UNIQUE INDEX IF NOT EXISTS "research_task_partials_job_idempotency_uq"
  ON "research_task_partial_results" ("research_task_job_id", "idempotency_key");
CREATE INDEX IF NOT EXISTS "research_task_partials_scope_job_sequence_idx"
  ON "research_task_partial_results" (
    "tenant_id", "research_task_job_id", "sequence", "id"
  );

CREATE TABLE IF NOT EXISTS "research_task_progress_events" (
  "id" uuid_text PRIMARY KEY NOT NULL,
  "tenant_id" VARCHAR(255) NOT NULL,
  "knowledge_space_id" uuid_text NOT NULL,
  "research_task_job_id" uuid_text NOT NULL,
  "sequence" INTEGER NOT NULL,
  "idempotency_key" VARCHAR(512) NOT NULL,
  "event_type" VARCHAR(64) NOT NULL,
  "stage" VARCHAR(16) NOT NULL,
  "payload" jsonb_text NOT NULL CHECK (json_valid("payload")),
  "created_at" BIGINT NOT NULL,
  CONSTRAINT "research_task_progress_sequence_ck" CHECK ("sequence" >= 1),
  CONSTRAINT "research_task_progress_event_ck" CHECK (
    "event_type" IN (
      'research_task.canceled', 'research_task.failed', 'research_task.paused',
      'research_task.resumed', 'research_task.stage_changed', 'research_task.started'
    )
  ),
  CONSTRAINT "research_task_progress_stage_ck" CHECK (
    "stage" IN (
      'queued', 'planning', 'retrieving', 'analyzing', 'generating',
      'paused', 'completed', 'failed', 'canceled'
    )
  ),
  FOREIGN KEY ("tenant_id", "knowledge_space_id", "research_task_job_id")
    REFERENCES "research_task_jobs" ("tenant_id", "knowledge_space_id", "id")
    ON DELETE CASCADE
);

CREATE UNIQUE INDEX IF NOT EXISTS "research_task_progress_job_sequence_uq"
  ON "research_task_progress_events" ("research_task_job_id", "sequence");
CREATE UNIQUE INDEX IF NOT EXISTS "research_task_progress_job_idempotency_uq"
  ON "research_task_progress_events" ("research_task_job_id", "idempotency_key");
CREATE INDEX IF NOT EXISTS "research_task_progress_scope_job_sequence_idx"
  ON "research_task_progress_events" (
    "tenant_id", "research_task_job_id", "sequence", "id"
  );

