-- `eru_map_add` (migration 0002) charges and releases a node's usage maps (used_cpu_map, used_numa_memory) on every
-- deploy batch, event and realloc. Its SQL body unpacked the whole base map and the delta, grouped and summed them
-- and built the map again: ~47 µs a call on a map of 32 cores, two calls per charged node (docs/store.md "Node usage
-- in PostgreSQL"). Now it changes only the delta's keys (~10–15 µs). The result is the same map: keys whose total is not above 0 are dropped, values are numeric sums;
-- a base that is not an object or already holds a key not above 0 (never written by eru) takes the old body, kept
-- as `eru_map_add_all`. tests/integration/store/test_map_add.py compares both on random maps.
CREATE FUNCTION eru_map_add_all(base jsonb, delta jsonb, factor bigint) RETURNS jsonb
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

CREATE OR REPLACE FUNCTION eru_map_add(base jsonb, delta jsonb, factor bigint) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    result jsonb := base;
    k text;
    v text;
    total numeric;
BEGIN
    IF jsonb_typeof(base) <> 'object' OR jsonb_path_exists(base, '$.* ? (@ <= 0)') THEN
        RETURN eru_map_add_all(base, delta, factor);
    END IF;
    FOR k, v IN SELECT e.key, e.value FROM jsonb_each_text(delta) AS e LOOP
        total := COALESCE((result ->> k)::numeric, 0) + v::numeric * factor;
        IF total > 0 THEN
            result := jsonb_set(result, ARRAY[k], to_jsonb(total));
        ELSE
            result := result - k;
        END IF;
    END LOOP;
    RETURN result;
END;
$$;
