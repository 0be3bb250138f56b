-- The passages of a space (?1 tenant, ?2 space) with these ids (?3, a JSON list of hex
-- ids, as SQLite stores a UUID in 16 bytes), score 0.
SELECT p."id", p."document_id", d."title", p."text", p."char_start", p."char_end", p."heading_path", p."page_start", p."page_end", d."source_uri", CAST(0.0 AS DOUBLE PRECISION) AS "score"
FROM "knowledge_passages" p JOIN "knowledge_documents" d ON d."id" = p."document_id"
WHERE p."tenant_id" = ?1 AND p."knowledge_space_id" = ?2 AND p."id" IN (SELECT unhex("value") FROM json_each(?3))
