-- A task by id (first parameter) if the subject (third) of the tenant (second) created it
-- and the grant it was created under holds now (fourth, epoch ms): the row and its
-- grant's verdict in one statement, the read every `researchTask(id)` makes.
SELECT "job".* FROM "research_task_jobs" AS "job"
WHERE "job"."id" = ? AND "job"."tenant_id" = ? AND "job"."subject_id" = ?
  AND (SELECT
