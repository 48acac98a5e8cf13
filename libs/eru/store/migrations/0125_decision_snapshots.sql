-- A batch's snapshot, stored once (docs/replay.md "A batch's snapshot, stored once"): the deploy decisions of a
-- batch name the nodes they saw unchanged instead of copying them (eru.planning.decision_record). Written in the
-- same transaction as those decisions, so `created_at` (now()) is theirs; partitioned by it like `decisions` and
-- dropped by the same retention pass (eru.store.retention). `nodes` is JSON text (name → node), only read whole.
CREATE TABLE decision_snapshots (
    id          text        NOT NULL,
    nodes       text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE TABLE decision_snapshots_default PARTITION OF decision_snapshots DEFAULT;
