-- full_text.sql once per query of a JSON array ($3), each ranked and limited on its own
-- ($4), within the documents $5 (uuid[]; NULL for all); "n" counts the queries from 1.
SELECT s."n", hit.* FROM jsonb_array_elements_text(CAST($3 AS jsonb)) WITH ORDINALITY AS s("words", "n")
CROSS JOIN LATERAL (
    SELECT p."id", p."document_id", d."title", p."text", p."char_start", p."char_end", p."heading_path", p."page_start", p."page_end", d."source_uri", ts_rank(p."search_vector", q)::float8 AS "score"
    FROM "knowledge_passages" p
    JOIN "knowledge_documents" d ON d."id" = p."document_id",
         websearch_to_tsquery('english', s."words") AS q
    WHERE p."tenant_id" = $1 AND p."knowledge_space_id" = $2 AND p."search_vector" @@ q
      AND (CAST($5 AS uuid[]) IS NULL OR p."document_id" IN (SELECT unnest(CAST($5 AS uuid[]))))
    ORDER BY "score" DESC, p."id"
    LIMIT $4
) AS hit
ORDER BY s."n", hit."score" DESC, hit."id"
