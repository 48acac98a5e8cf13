-- The deploy pipeline (docs/pipeline.md): relative usage updates, realloc and replace bookkeeping.

-- base + factor × delta for maps of core id / NUMA id → amount; entries that reach 0 are dropped and nothing goes
-- below 0. Usage is always changed RELATIVELY with this function (never written back from a snapshot), so a release
-- committed between a deploy's snapshot and its commit is never overwritten.
CREATE FUNCTION eru_map_add(base jsonb, delta jsonb, factor bigint) RETURNS jsonb
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (
        SELECT COALESCE(jsonb_object_agg(key, total ORDER BY key), '{}'::jsonb)
          FROM (SELECT key, sum(amount) AS total
                  FROM (SELECT key, value::numeric AS amount FROM jsonb_each_text(base)
                        UNION ALL
                        SELECT key, value::numeric * factor FROM jsonb_each_text(delta)) AS parts
                 GROUP BY key) AS sums
         WHERE total > 0
    );

-- A realloc in flight: the allocation the container had before (restored if the node agent's update fails).
ALTER TABLE containers ADD COLUMN previous_allocation jsonb;
-- A replacement container: the id of the container whose allocation it takes over (docs/node-agent.md, Replace); it holds no
-- resources of its own until the replace succeeds.
ALTER TABLE containers ADD COLUMN replaces text;
-- Existing instances of a workload per node (placement input `count`).
CREATE INDEX containers_live_workload ON containers (pod, workload, node) WHERE state NOT IN ('removed', 'failed');
CREATE INDEX containers_replaces ON containers (replaces) WHERE replaces IS NOT NULL;
