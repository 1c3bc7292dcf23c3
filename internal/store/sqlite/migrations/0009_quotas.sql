-- Quota limits (os-quota-sets): a project's own limits, or with project ''
-- the default quota class's, as a JSON object of name → limit.
CREATE TABLE quota_limits (
    project TEXT PRIMARY KEY,
    data    TEXT NOT NULL
);
