           AS "any_endpoint"
FROM "fenced" AS "job"
JOIN "input" AS b ON b."id" = "job"."id"
LEFT JOIN "events" AS ev ON ev."research_task_job_id" = "job"."id"
