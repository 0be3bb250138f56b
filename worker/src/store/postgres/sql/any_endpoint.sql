-- Whether the creator of the task row "job" (its tenant, space and subject) has an
-- enabled webhook endpoint: an expression over "job" the including statement provides.
EXISTS (SELECT 1 FROM "webhook_endpoints" AS w
        WHERE w."tenant_id" = "job"."tenant_id" AND w."knowledge_space_id" = "job"."knowledge_space_id"
          AND w."subject_id" = "job"."subject_id" AND w."disabled_at" IS NULL)
