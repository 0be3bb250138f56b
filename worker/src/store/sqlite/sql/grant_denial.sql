-- The grant rule (SQLite): NULL when the permission snapshot "grant_of"."snapshot_id"
-- holds at "grant_of"."now" (epoch milliseconds), else why it does not. An expression over
-- a row "grant_of" the including statement provides. A member's grant holds while that
-- membership is current at the snapshot's revision; a key's while the key exists, is
-- unrevoked, still at the snapshot's revision, and neither it nor the snapshot expired.
NULLIF(COALESCE((
    SELECT CASE
        WHEN gs."api_key_id" IS NULL THEN
            CASE WHEN gm."id" IS NOT NULL AND gm."removed_at" IS NULL AND gm."revision" = gs."revision"
                 THEN 'holds' ELSE 'membershipchanged' END
        WHEN gk."id" IS NULL OR gk."revoked_at" IS NOT NULL THEN 'keyrevoked'
        WHEN gs."api_key_revision" IS NULL OR gk."revision" <> gs."api_key_revision" THEN 'keyrotated'
        WHEN (gk."expires_at" IS NOT NULL AND gk."expires_at" <= "grant_of"."now")
          OR (gs."api_key_expires_at" IS NOT NULL
              AND unixepoch(gs."api_key_expires_at", 'subsec') * 1000 <= "grant_of"."now")
            THEN 'keyexpired'
        ELSE 'holds'
    END
    FROM "knowledge_space_permission_snapshots" AS gs
    LEFT JOIN "knowledge_space_api_keys" AS gk ON gk."id" = gs."api_key_id"
    LEFT JOIN "knowledge_space_members" AS gm
        ON gs."api_key_id" IS NULL AND gm."tenant_id" = gs."tenant_id"
       AND gm."knowledge_space_id" = gs."knowledge_space_id" AND gm."subject_id" = gs."subject_id"
    WHERE gs."id" = "grant_of"."snapshot_id"
), 'missing'), 'holds')
