-- A task row's lease token and stage, locked, with its grant's verdict at `$2` (epoch
-- ms): what a stage boundary's fence checks. (grant_denial.sql follows this piece.)
SELECT "job"."lease_token", "job"."stage", (SELECT
