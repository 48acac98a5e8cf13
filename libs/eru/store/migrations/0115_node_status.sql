-- What others report about a node — its agent's last heartbeat, the eviction service's newest condition — in a
-- narrow table of its own (docs/store.md "Node status"). In `nodes` these writes needed the row a deploy's usage
-- update holds for its whole transaction: at 1,000 nodes the heartbeats (200/s) and conditions queued behind deploys
-- for seconds, held the allocator's pool connections meanwhile, and every beat rewrote the wide row. Here they never
-- wait on a deploy, are written a batch per statement, and do not change `nodes.version` (the snapshot cache's key).
CREATE TABLE node_status (
    name         text        PRIMARY KEY REFERENCES nodes (name) ON DELETE CASCADE ON UPDATE CASCADE,
    heartbeat_at timestamptz,
    conditions   jsonb       NOT NULL DEFAULT '{}'
);
ALTER TABLE node_status SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
INSERT INTO node_status (name, heartbeat_at, conditions) SELECT name, heartbeat_at, conditions FROM nodes;
ALTER TABLE nodes DROP COLUMN heartbeat_at, DROP COLUMN conditions;
