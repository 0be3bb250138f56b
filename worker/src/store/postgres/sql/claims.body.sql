           AS "any_endpoint",
       -- The grant at the claim's time (grant_denial.sql follows).
       (SELECT
