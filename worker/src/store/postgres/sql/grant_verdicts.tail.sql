    AS "denial"
FROM (SELECT "id" AS "snapshot_id", CAST($2 AS bigint) AS "now" FROM unnest(CAST($1 AS uuid[])) AS "id") AS "grant_of"
