-- The grant rule's verdict for each snapshot id of `?1` (a JSON list of hex ids, as
-- SQLite stores a UUID in 16 bytes) at `?2` (epoch ms): "denial" is NULL when the
-- snapshot holds. (grant_denial.sql follows this piece.)
SELECT "grant_of"."snapshot_id",
