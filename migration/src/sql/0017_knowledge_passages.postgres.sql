-- Documents as passages: the document's format, source and metadata, its revision, the
-- state of its embeddings (a backlog the worker loops lease), its passages with their
-- full-text index, and one vector per passage and model. Safe to replay: every statement
-- is conditional.
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "media_type" VARCHAR(32) NOT NULL DEFAULT 'text/plain';
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "source_uri" TEXT;
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "metadata" JSONB NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "revision" INTEGER NOT NULL DEFAULT 1;
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "indexed_revision" INTEGER;
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "indexing_status" VARCHAR(16) NOT NULL DEFAULT 'pending';
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "indexing_error" TEXT;
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "indexing_attempts" INTEGER NOT NULL DEFAULT 0;
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "indexing_available_at" BIGINT;
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "indexing_lock_token" UUID;
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "indexing_locked_by" VARCHAR(255);
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "indexing_locked_until" BIGINT;
ALTER TABLE "knowledge_documents" ADD COLUMN IF NOT EXISTS "updated_by" VARCHAR(255);
DO $kfs_0017_document_checks$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM "pg_constraint" WHERE "conrelid" = 'knowledge_documents'::regclass
                 AND "conname" = 'knowledge_documents_media_type_ck') THEN
    ALTER TABLE "knowledge_documents" ADD CONSTRAINT "knowledge_documents_media_type_ck"
      CHECK ("media_type" IN ('text/plain', 'text/markdown', 'text/html'));
  END IF;
  IF NOT EXISTS (SELECT 1 FROM "pg_constraint" WHERE "conrelid" = 'knowledge_documents'::regclass
                 AND "conname" = 'knowledge_documents_indexing_ck') THEN
    ALTER TABLE "knowledge_documents" ADD CONSTRAINT "knowledge_documents_indexing_ck" CHECK (
      "indexing_status" IN ('pending', 'ready', 'failed')
      AND "revision" >= 1 AND "indexing_attempts" >= 0
      AND (("indexing_lock_token" IS NULL AND "indexing_locked_by" IS NULL AND "indexing_locked_until" IS NULL)
        OR ("indexing_lock_token" IS NOT NULL AND "indexing_locked_by" IS NOT NULL AND "indexing_locked_until" IS NOT NULL))
    );
  END IF;
  IF NOT EXISTS (SELECT 1 FROM "pg_constraint" WHERE "conrelid" = 'knowledge_documents'::regclass
                 AND "conname" = 'knowledge_documents_metadata_ck') THEN
    ALTER TABLE "knowledge_documents" ADD CONSTRAINT "knowledge_documents_metadata_ck"
      CHECK (jsonb_typeof("metadata") = 'object');
  END IF;
END
$kfs_0017_document_checks$;
CREATE UNIQUE INDEX IF NOT EXISTS "knowledge_documents_scope_id_uq"
  ON "knowledge_documents" ("tenant_id", "knowledge_space_id", "id");
CREATE INDEX IF NOT EXISTS "knowledge_documents_indexing_idx"
  ON "knowledge_documents" ("indexing_status", "indexing_available_at", "id");

CREATE TABLE IF NOT EXISTS "knowledge_passages" (
  "id" UUID PRIMARY KEY NOT NULL,
  "tenant_id" VARCHAR(255) NOT NULL,
  "knowledge_space_id" UUID NOT NULL,
  "document_id" UUID NOT NULL,
  "document_revision" INTEGER NOT NULL,
  "ordinal" INTEGER NOT NULL,
  "char_start" INTEGER NOT NULL,
  "char_end" INTEGER NOT NULL,
  "heading_path" JSONB NOT NULL,
  "context" TEXT NOT NULL,
  "text" TEXT NOT NULL,
  "token_count" INTEGER NOT NULL,
  "created_at" BIGINT NOT NULL,
  CONSTRAINT "knowledge_passages_range_ck" CHECK (
    "ordinal" >= 0 AND "char_start" >= 0 AND "char_end" >= "char_start" AND "token_count" >= 0
    AND "document_revision" >= 1 AND jsonb_typeof("heading_path") = 'array'
  ),
  CONSTRAINT "knowledge_passages_document_fk" FOREIGN KEY ("tenant_id", "knowledge_space_id", "document_id")
    REFERENCES "knowledge_documents" ("tenant_id", "knowledge_space_id", "id") ON DELETE CASCADE
);
CREATE UNIQUE INDEX IF NOT EXISTS "knowledge_passages_document_ordinal_uq"
  ON "knowledge_passages" ("document_id", "ordinal");
CREATE INDEX IF NOT EXISTS "knowledge_passages_space_idx"
  ON "knowledge_passages" ("tenant_id", "knowledge_space_id");
CREATE UNIQUE INDEX IF NOT EXISTS "knowledge_passages_scope_id_uq"
  ON "knowledge_passages" ("tenant_id", "knowledge_space_id", "id");
-- The tsvector is stored, so ranking reads it instead of re-parsing every matched
-- passage's text; the GIN index finds the matches.
ALTER TABLE "knowledge_passages" ADD COLUMN IF NOT EXISTS "search_vector" TSVECTOR
  GENERATED ALWAYS AS (to_tsvector('english'::regconfig, "context" || ' ' || "text")) STORED;
CREATE INDEX IF NOT EXISTS "knowledge_passages_search_idx"
  ON "knowledge_passages" USING GIN ("search_vector");

CREATE TABLE IF NOT EXISTS "knowledge_passage_embeddings" (
  "passage_id" UUID PRIMARY KEY NOT NULL,
  "tenant_id" VARCHAR(255) NOT NULL,
  "knowledge_space_id" UUID NOT NULL,
  "model" VARCHAR(255) NOT NULL,
  "dimensions" INTEGER NOT NULL,
  "vector" BYTEA NOT NULL,
  "created_at" BIGINT NOT NULL,
  CONSTRAINT "knowledge_passage_embeddings_vector_ck" CHECK (
    "dimensions" >= 1 AND octet_length("vector") = 4 * "dimensions"
  ),
  CONSTRAINT "knowledge_passage_embeddings_passage_fk" FOREIGN KEY ("tenant_id", "knowledge_space_id", "passage_id")
    REFERENCES "knowledge_passages" ("tenant_id", "knowledge_space_id", "id") ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS "knowledge_passage_embeddings_space_model_idx"
  ON "knowledge_passage_embeddings" ("knowledge_space_id", "model");

-- Whole documents are no longer searched: their passages are.
DROP INDEX IF EXISTS "knowledge_documents_search_idx";
