-- Batch work that keeps its count, and the memory of evictions (docs/colocation.md).
-- Evictions of batch containers as the allocator learnt them (the container removed by an eviction decision): the
-- recorded input of every later batch placement of the workload (nodes it evicted from are avoided for a back-off).
CREATE TABLE evictions (
    container_id text             PRIMARY KEY,
    pod          text             NOT NULL,
    workload     text             NOT NULL,
    node         text             NOT NULL,
    lineage      text             NOT NULL,  -- the logical instance: its first container's id
    at           double precision NOT NULL   -- epoch seconds
);
CREATE INDEX evictions_recent ON evictions (pod, workload, at);

-- One row per logical instance of a kept batch deploy (`keep: true`): its current container, its evictions, and
-- when it is due to be placed again.
CREATE TABLE kept_instances (
    lineage      text             PRIMARY KEY,
    deploy_id    text             NOT NULL REFERENCES deploys (id),
    pod          text             NOT NULL,
    workload     text             NOT NULL,
    container_id text,
    request_id   text,              -- the re-placement deploy in flight
    evictions    jsonb            NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(evictions) = 'array'),
    generation   integer          NOT NULL DEFAULT 0,
    state        text             NOT NULL CHECK (state IN ('running', 'waiting', 'placing', 'gave_up', 'done')),
    due_at       double precision
);
CREATE INDEX kept_instances_container ON kept_instances (container_id);
CREATE INDEX kept_instances_state ON kept_instances (state);
