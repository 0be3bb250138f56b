-- Full-text search over passages: a standalone FTS5 table keyed by the passage's id (an
-- external-content table would key on rowid, which VACUUM may renumber), kept in step by
-- triggers. Whole documents are no longer searched: their index goes.
CREATE VIRTUAL TABLE IF NOT EXISTS "knowledge_passages_fts" USING fts5(
  "passage_id" UNINDEXED,
  "knowledge_space_id" UNINDEXED,
  "context",
  "text",
  tokenize = 'porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS "knowledge_passages_fts_insert"
AFTER INSERT ON "knowledge_passages" BEGIN
  INSERT INTO "knowledge_passages_fts" ("passage_id", "knowledge_space_id", "context", "text")
  VALUES (NEW."id", NEW."knowledge_space_id", NEW."context", NEW."text");
END;
CREATE TRIGGER IF NOT EXISTS "knowledge_passages_fts_update"
AFTER UPDATE ON "knowledge_passages" BEGIN
  DELETE FROM "knowledge_passages_fts" WHERE "passage_id" = OLD."id";
  INSERT INTO "knowledge_passages_fts" ("passage_id", "knowledge_space_id", "context", "text")
  VALUES (NEW."id", NEW."knowledge_space_id", NEW."context", NEW."text");
END;
CREATE TRIGGER IF NOT EXISTS "knowledge_passages_fts_delete"
AFTER DELETE ON "knowledge_passages" BEGIN
  DELETE FROM "knowledge_passages_fts" WHERE "passage_id" = OLD."id";
END;
DROP TRIGGER IF EXISTS "knowledge_documents_fts_insert";
DROP TRIGGER IF EXISTS "knowledge_documents_fts_update";
DROP TRIGGER IF EXISTS "knowledge_documents_fts_delete";
DROP TABLE IF EXISTS "knowledge_documents_fts";
