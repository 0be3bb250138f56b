-- The retrieval query must use this exact expression to hit the index.
CREATE INDEX IF NOT EXISTS "knowledge_documents_search_idx"
  ON "knowledge_documents"
  USING GIN (to_tsvector('english'::regconfig, "title" || ' ' || "content"));
