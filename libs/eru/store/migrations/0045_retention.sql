-- Retention (docs/store.md "Retention"): finished records live in time-partitioned tables whose old partitions are
-- dropped whole (eru.store.retention), never deleted row by row. Live state (pods, nodes, tenants, live containers,
-- running deploys) is never touched.

-- What retention dropped, so a lookup past it answers "expired at …" (range_from NULL: from the beginning).
CREATE TABLE retention_drops (
    table_name  text        NOT NULL,
    partition   text        NOT NULL,
    range_from  timestamptz,
    range_to    timestamptz NOT NULL,
    rows        bigint      NOT NULL,
    dropped_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, range_to)
);

-- Decisions are written once and never changed: the table itself is partitioned by creation time. The rows so far
-- become its first partition (up to this migration); eru.store.retention adds the next ones ahead of time, and the
-- default partition only catches rows no partition covers yet (a clock jump, a long outage of every allocator).
ALTER TABLE decisions RENAME TO decisions_before_retention;
-- its key becomes (id, created_at) when attached: a partitioned table's keys include the partitioning column
ALTER TABLE decisions_before_retention DROP CONSTRAINT decisions_pkey;
ALTER INDEX decisions_kind_created RENAME TO decisions_before_retention_kind_created;
CREATE TABLE decisions (
    id          text        NOT NULL,
    kind        text        NOT NULL CONSTRAINT decisions_kind_check CHECK (kind <> ''),
    input       text        NOT NULL,
    output      jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX decisions_kind_created ON decisions (kind, created_at);
CREATE TABLE decisions_default PARTITION OF decisions DEFAULT;
DO $$
BEGIN
    EXECUTE format('ALTER TABLE decisions ATTACH PARTITION decisions_before_retention FOR VALUES FROM (MINVALUE) TO (%L)',
                   now());
END;
$$;

-- Finished containers and deploys move here from the live tables once finished for a short grace period (a few
-- minutes at most): the live tables stay the size of what runs, and these are partitioned by the time the record
-- finished. `record` is the whole row as it was (to_jsonb), so a column added to the live table later needs no
-- change here.
CREATE TABLE containers_history (
    id           text        NOT NULL,
    deploy_id    text,
    node         text        NOT NULL,
    pod          text        NOT NULL,
    state        text        NOT NULL,
    finished_at  timestamptz NOT NULL,
    record       jsonb       NOT NULL
) PARTITION BY RANGE (finished_at);
CREATE INDEX containers_history_id ON containers_history (id);
CREATE INDEX containers_history_deploy ON containers_history (deploy_id);
CREATE TABLE containers_history_default PARTITION OF containers_history DEFAULT;

CREATE TABLE deploys_history (
    id           text        NOT NULL,
    request_id   text        NOT NULL,
    pod          text        NOT NULL,
    tenant       text        NOT NULL,
    status       text        NOT NULL,
    finished_at  timestamptz NOT NULL,
    record       jsonb       NOT NULL
) PARTITION BY RANGE (finished_at);
CREATE INDEX deploys_history_id ON deploys_history (id);
CREATE INDEX deploys_history_request ON deploys_history (request_id);
CREATE TABLE deploys_history_default PARTITION OF deploys_history DEFAULT;

-- The movers find finished rows by the time they finished.
CREATE INDEX containers_finished ON containers (updated_at) WHERE state IN ('removed', 'failed', 'lost');
CREATE INDEX deploys_finished ON deploys (updated_at) WHERE status NOT IN ('planned', 'waiting');
