-- Whether the grant of the row of "research_task_jobs" in the including statement holds
-- at the one bound parameter (epoch ms): a condition for lists of tasks.
(SELECT
