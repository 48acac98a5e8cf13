-- A container's health check as its node agent last reported it (docs/node-agent.md "Health and node TTL"):
-- starting | healthy | unhealthy; NULL for a workload without a health command (or before its first report).
ALTER TABLE containers ADD COLUMN health text;
ALTER TABLE containers ADD COLUMN health_at timestamptz;
