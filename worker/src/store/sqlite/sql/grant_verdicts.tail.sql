    AS "denial"
FROM (SELECT unhex("value") AS "snapshot_id", ?2 AS "now" FROM json_each(?1)) AS "grant_of"
