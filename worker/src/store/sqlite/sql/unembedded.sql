-- Up to a limit (third parameter) of a document's (first) passages without an embedding
-- by a model (second), in order.
SELECT p."id", p."tenant_id", p."knowledge_space_id", p."context", p."text" FROM "knowledge_passages" p
WHERE p."document_id" = ? AND NOT EXISTS (
  SELECT 1 FROM "knowledge_passage_embeddings" e WHERE e."passage_id" = p."id" AND e."model" = ?)
ORDER BY p."ordinal" LIMIT ?
