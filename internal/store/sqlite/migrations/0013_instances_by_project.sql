-- Instances by project (quota counts read a project's instances only):
-- an index on the JSON record's project_id, the expression the query uses.
CREATE INDEX instances_by_project ON instances (json_extract(data, '$.project_id'));
