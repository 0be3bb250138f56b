  AND "knowledge_space_id" = $3
