  AND "knowledge_space_id" = ?
