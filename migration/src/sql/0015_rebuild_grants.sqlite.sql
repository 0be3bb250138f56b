-- SQLite cannot add a table CHECK or a FOREIGN KEY to an existing table, so the seed's
-- ALTER TABLEs become a rebuild. It runs only while "api_key_id" is missing, inside the
-- migration's transaction, before anything references these tables.
CREATE TABLE "knowledge_space_permission_snapshots_0015" (
  "id" uuid_text NOT NULL PRIMARY KEY,
  "tenant_id" varchar(255) NOT NULL,
  "knowledge_space_id" uuid_text NOT NULL,
  "subject_id" varchar(255) NOT NULL,
  "access_channel" varchar(16) NOT NULL,
  "revision" integer NOT NULL,
  "permissions" jsonb_text NOT NULL CHECK (json_valid("permissions")),
  "issued_at" bigint NOT NULL,
  "api_key_id" uuid_text,
  "api_key_revision" integer,
  "api_key_expires_at" timestamp_with_timezone_text,
  CONSTRAINT "knowledge_space_permission_snapshots_channel_ck"
    CHECK ("access_channel" IN ('interactive', 'service_api', 'mcp', 'agent')),
  CONSTRAINT "knowledge_space_permission_snapshots_revision_ck" CHECK ("revision" >= 1),
  CONSTRAINT "knowledge_space_permission_snapshots_api_key_binding_ck" CHECK (
    ("api_key_id" IS NULL AND "api_key_revision" IS NULL AND "api_key_expires_at" IS NULL)
    OR ("api_key_id" IS NOT NULL AND "api_key_revision" >= 1)
  ),
  CONSTRAINT "knowledge_space_permission_snapshots_space_fk"
    FOREIGN KEY ("tenant_id", "knowledge_space_id")
    REFERENCES "knowledge_spaces" ("tenant_id", "id") ON DELETE CASCADE,
  CONSTRAINT "knowledge_space_permission_snapshots_api_key_fk"
    FOREIGN KEY ("tenant_id", "knowledge_space_id", "api_key_id")
    REFERENCES "knowledge_space_api_keys" ("tenant_id", "knowledge_space_id", "id") ON DELETE RESTRICT
);
INSERT INTO "knowledge_space_permission_snapshots_0015"
  ("id", "tenant_id", "knowledge_space_id", "subject_id", "access_channel", "revision", "permissions", "issued_at")
  SELECT "id", "tenant_id", "knowledge_space_id", "subject_id", "access_channel", "revision", "permissions", "issued_at"
  FROM "knowledge_space_permission_snapshots";
DROP TABLE "knowledge_space_permission_snapshots";
ALTER TABLE "knowledge_space_permission_snapshots_0015" RENAME TO "knowledge_space_permission_snapshots";
CREATE UNIQUE INDEX IF NOT EXISTS "knowledge_space_permission_snapshots_provenance_uq"
  ON "knowledge_space_permission_snapshots" ("tenant_id", "knowledge_space_id", "id", "subject_id", "access_channel");
CREATE UNIQUE INDEX IF NOT EXISTS "knowledge_space_permission_snapshots_trace_provenance_uq"
  ON "knowledge_space_permission_snapshots" ("knowledge_space_id", "id", "subject_id", "access_channel");

CREATE TABLE "answer_traces_0015" (
  "id" uuid_text NOT NULL PRIMARY KEY,
  "tenant_id" varchar(255) NOT NULL,
  "knowledge_space_id" uuid_text NOT NULL,
  "query" text NOT NULL,
  "answer" text NOT NULL,
  "evidence" jsonb_text NOT NULL CHECK (json_valid("evidence")),
  "created_at" bigint NOT NULL,
  "subject_id" varchar(255),
  "permission_snapshot_id" uuid_text,
  "permission_snapshot_revision" integer,
  "access_channel" varchar(16),
  CONSTRAINT "answer_traces_permission_snapshot_binding_ck" CHECK (
    ("permission_snapshot_id" IS NULL AND "permission_snapshot_revision" IS NULL AND "access_channel" IS NULL)
    OR (
      "subject_id" IS NOT NULL
      AND "permission_snapshot_id" IS NOT NULL
      AND "permission_snapshot_revision" >= 1
      AND "access_channel" IN ('interactive', 'service_api', 'mcp', 'agent')
    )
  ),
  CONSTRAINT "answer_traces_space_fk"
    FOREIGN KEY ("tenant_id", "knowledge_space_id")
    REFERENCES "knowledge_spaces" ("tenant_id", "id") ON DELETE CASCADE,
  CONSTRAINT "answer_traces_permission_snapshot_fk"
    FOREIGN KEY ("knowledge_space_id", "permission_snapshot_id", "subject_id", "access_channel")
    REFERENCES "knowledge_space_permission_snapshots" ("knowledge_space_id", "id", "subject_id", "access_channel")
    ON DELETE RESTRICT
);
INSERT INTO "answer_traces_0015" ("id", "tenant_id", "knowledge_space_id", "query", "answer", "evidence", "created_at")
  SELECT "id", "tenant_id", "knowledge_space_id", "query", "answer", "evidence", "created_at" FROM "answer_traces";
DROP TABLE "answer_traces";
ALTER TABLE "answer_traces_0015" RENAME TO "answer_traces";
