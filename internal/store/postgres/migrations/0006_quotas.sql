-- Quota limits (os-quota-sets): a project's own limits, or with project ''
-- the default quota class's, as a JSON object of name → limit.
CREATE TABLE quota_limits (
    project text COLLATE "C" PRIMARY KEY,
    data    jsonb NOT NULL
);
