-- A standalone FTS5 table keyed by the document's id: an external-content table would key
-- on rowid, which VACUUM may renumber for tables without an INTEGER PRIMARY KEY.
CREATE VIRTUAL TABLE IF NOT EXISTS "knowledge_documents_fts" USING fts5(
  "document_id" UNINDEXED,
  "knowledge_space_id" UNINDEXED,
  "title",
  "content",
  tokenize = 'porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS "knowledge_documents_fts_insert"
AFTER INSERT ON "knowledge_documents" BEGIN
  INSERT INTO "knowledge_documents_fts" ("document_id", "knowledge_space_id", "title", "content")
  VALUES (NEW."id", NEW."knowledge_space_id", NEW."title", NEW."content");
END;
CREATE TRIGGER IF NOT EXISTS "knowledge_documents_fts_update"
AFTER UPDATE ON "knowledge_documents" BEGIN
  DELETE FROM "knowledge_documents_fts" WHERE "document_id" = OLD."id";
  INSERT INTO "knowledge_documents_fts" ("document_id", "knowledge_space_id", "title", "content")
  VALUES (NEW."id", NEW."knowledge_space_id", NEW."title", NEW."content");
END;
CREATE TRIGGER IF NOT EXISTS "knowledge_documents_fts_delete"
AFTER DELETE ON "knowledge_documents" BEGIN
  DELETE FROM "knowledge_documents_fts" WHERE "document_id" = OLD."id";
END;
