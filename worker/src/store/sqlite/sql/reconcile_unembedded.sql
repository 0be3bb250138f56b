-- Ready documents whose passages lack vectors of a model (first parameter) wait again,
-- due at the second (epoch ms).
UPDATE "knowledge_documents" SET "indexing_status" = 'pending', "indexing_available_at" = ?2
WHERE "indexing_status" = 'ready' AND EXISTS (
  SELECT 1 FROM "knowledge_passages" p WHERE p."document_id" = "knowledge_documents"."id"
    AND NOT EXISTS (SELECT 1 FROM "knowledge_passage_embeddings" e
                    WHERE e."passage_id" = p."id" AND e."model" = ?1))
