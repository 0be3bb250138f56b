-- The best passages of a space for an FTS5 MATCH expression (SQLite). Parameters: the
-- expression, the space, the limit, the tenant, the space again, and only the passages of
-- these documents (a JSON list of hex ids; NULL for all), applied before the limit. The best matches first,
-- from the FTS table alone (CROSS JOIN keeps SQLite from running the MATCH once per
-- passage of an outer loop). bm25 weights: the two unindexed key columns, then the
-- context (title and headings, repeated on every passage of a document) at half the
-- text's weight.
SELECT p."id", p."document_id", d."title", p."text", p."char_start", p."char_end", p."heading_path", p."page_start", p."page_end", d."source_uri", h."score" AS "score"
FROM (SELECT "passage_id", -bm25("knowledge_passages_fts", 0.0, 0.0, 0.5, 1.0) AS "score"
      FROM "knowledge_passages_fts"
      WHERE "knowledge_passages_fts" MATCH ?1 AND "knowledge_space_id" = ?2
        AND (?6 IS NULL OR "passage_id" IN (SELECT f."id" FROM "knowledge_passages" f
                                            WHERE f."document_id" IN (SELECT unhex("value") FROM json_each(?6))))
      ORDER BY "score" DESC, "passage_id"
      LIMIT ?3) h
CROSS JOIN "knowledge_passages" p ON p."id" = h."passage_id"
JOIN "knowledge_documents" d ON d."id" = p."document_id"
WHERE p."tenant_id" = ?4 AND p."knowledge_space_id" = ?5
ORDER BY h."score" DESC, p."id"
