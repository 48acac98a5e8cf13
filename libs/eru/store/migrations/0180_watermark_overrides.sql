-- Watermarks as live configuration (docs/colocation.md "Watermarks set live"): an operator's per-node and per-pod
-- overrides of the eviction service's percentages (`eru node set NODE --watermark cpu_evict=70`, `eru pod set POD
-- --watermark …`). The allocator writes them (validated as a whole with the other layers, under the pod's lock) and
-- publishes each change through the outbox on `eru.watermarks.<scope>.<name>`; eviction replicas apply them at
-- their next sample and resync from `query watermarks`. A cleared override stays as an empty object so `version`
-- keeps growing: a reader keeps the newest version it has seen.
CREATE TABLE watermark_overrides (
    scope      text        NOT NULL CHECK (scope IN ('node', 'pod')),
    name       text        NOT NULL,
    settings   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    version    bigint      NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name)
);
