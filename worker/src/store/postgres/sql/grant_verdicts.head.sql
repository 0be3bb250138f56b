-- The grant rule's verdict for each snapshot id of `$1` (uuid[]) at `$2` (epoch ms):
-- "denial" is NULL when the snapshot holds. (grant_denial.sql follows this piece.)
SELECT "grant_of"."snapshot_id",
