-- The best passages of a space for a websearch query (PostgreSQL): $1 tenant, $2 space,
-- $3 the words joined by "or", $4 the limit, $5 only these documents (uuid[]; NULL for all). `search_vector` is the stored tsvector of
-- context and text, GIN-indexed (m0017).
SELECT p."id", p."document_id", d."title", p."text", p."char_start", p."char_end", p."heading_path", p."page_start", p."page_end", d."source_uri", ts_rank(p."search_vector", q)::float8 AS "score"
FROM "knowledge_passages" p
JOIN "knowledge_documents" d ON d."id" = p."document_id",
     websearch_to_tsquery('english', $3) AS q
WHERE p."tenant_id" = $1 AND p."knowledge_space_id" = $2 AND p."search_vector" @@ q
  AND (CAST($5 AS uuid[]) IS NULL OR p."document_id" IN (SELECT unnest(CAST($5 AS uuid[]))))
ORDER BY "score" DESC, p."id"
LIMIT $4
