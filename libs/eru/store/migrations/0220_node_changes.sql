-- A deploy batch reads only the node rows changed since its allocator's last read (docs/store.md "Node changes"):
-- each node row carries the id of the transaction that last wrote it (`changed_xid`, set by a trigger on every
-- INSERT and UPDATE, whatever column changed), and a read hands back its horizon — the oldest transaction still in
-- progress when it read (`pg_snapshot_xmin`), or its own transaction if older. Every row written by a transaction
-- older than the horizon was committed before the read and so was seen by it; every other change has
-- `changed_xid >= horizon` and comes back in the next read that passes that horizon. A replica's writes, the node
-- agents', the operators' — all bump the row, so a reader misses none of them.
--
-- No index on `changed_xid`: a usage update stays a HOT update; the next read filters the pod's rows in PostgreSQL
-- (a few µs per 1,000 rows) and sends only the changed ones.
ALTER TABLE nodes ADD COLUMN changed_xid xid8 NOT NULL DEFAULT pg_current_xact_id();

CREATE FUNCTION eru_node_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.changed_xid := pg_current_xact_id();
    RETURN NEW;
END;
$$;
CREATE TRIGGER nodes_changed BEFORE INSERT OR UPDATE ON nodes FOR EACH ROW EXECUTE FUNCTION eru_node_changed();

-- `eru_open_deploy_batch` (migration 0160, unchanged: a replica of the previous version keeps calling it during a
-- rolling upgrade) with the node part sent as changes. Same row shape; the parts `pod`, `deploy`, `count`,
-- `reservation`, `tenant` are 0160's; the nodes come as:
--   'horizon'  t1 = the read's horizon (xid8 as text): the caller's `p_since` for its next read
--   'node'     a row of ANY pod written by a transaction not older than `p_since` (every row of `p_pod` when
--              `p_since` is NULL), or named in `p_recheck`: name; t1 = xmin, t2 = pod, t3 = 'own' when the row was
--              written by the reading transaction itself (not committed: read it again next time), n1 = version;
--              for a row of `p_pod`: j3 = cpu_map, n2 = memory, j4 = numa, j5 = numa_memory, j6 = used_cpu_map,
--              n3 = used_memory, j7 = used_numa_memory
--   'skip'     name: a node of `p_pod` that is not schedulable (down, cordoned, or silent past `p_down_after`)
--   'forbid'   name: a node of `p_pod` whose newest condition forbids batch instances (cpu or memory)
CREATE FUNCTION eru_open_deploy_batch_since(
    p_lock bigint, p_pod text, p_keys text[], p_workloads text[], p_down_after double precision,
    p_since text, p_recheck text[]
) RETURNS TABLE (
    part text, name text, t1 text, t2 text, t3 text, n1 bigint, n2 bigint, n3 bigint, num numeric,
    j1 jsonb, j2 jsonb, j3 jsonb, j4 jsonb, j5 jsonb, j6 jsonb, j7 jsonb
)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_horizon xid8;
BEGIN
    IF p_lock IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(p_lock);
    END IF;
    RETURN QUERY SELECT 'pod'::text, p.name, NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::bigint,
                        NULL::bigint, NULL::numeric, p.policy, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb,
                        NULL::jsonb, NULL::jsonb
                   FROM pods p WHERE p.name = p_pod;
    -- as eru_allocator.settled.FIND_SQL: live deploys, then history, then settled outcomes of neither
    RETURN QUERY SELECT 'deploy'::text, f.request_id, f.id, f.status, f.message_id, NULL::bigint, NULL::bigint,
                        NULL::bigint, NULL::numeric, f.result, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb,
                        NULL::jsonb, NULL::jsonb
                   FROM (
                        SELECT d.id, d.request_id, d.status, d.result, NULL::text AS message_id
                          FROM deploys d WHERE d.request_id = ANY (p_keys)
                        UNION ALL
                        SELECT h.id, h.request_id, h.status, h.record -> 'result', NULL::text
                          FROM deploys_history h WHERE h.request_id = ANY (p_keys)
                        UNION ALL
                        (SELECT DISTINCT ON (s.request_id)
                                s.deploy_id, s.request_id, 'settled:' || s.outcome,
                                json_build_object('reason', s.reason)::jsonb, s.message_id
                           FROM settled_requests s
                          WHERE s.request_id = ANY (p_keys)
                            AND NOT EXISTS (SELECT 1 FROM deploys d WHERE d.request_id = s.request_id)
                            AND NOT EXISTS (SELECT 1 FROM deploys_history h WHERE h.request_id = s.request_id)
                          ORDER BY s.request_id, s.outcome = 'accepted' DESC, s.settled_at DESC)
                   ) AS f;
    -- the horizon before the node read: a later snapshot sees at least what this one saw
    v_horizon := pg_snapshot_xmin(pg_current_snapshot());
    IF pg_current_xact_id_if_assigned() IS NOT NULL AND pg_current_xact_id_if_assigned() < v_horizon THEN
        v_horizon := pg_current_xact_id_if_assigned();
    END IF;
    RETURN QUERY SELECT 'horizon'::text, NULL::text, v_horizon::text, NULL::text, NULL::text, NULL::bigint,
                        NULL::bigint, NULL::bigint, NULL::numeric, NULL::jsonb, NULL::jsonb, NULL::jsonb,
                        NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb;
    RETURN QUERY SELECT 'node'::text, n.name, n.xmin::text, n.pod,
                        CASE WHEN n.changed_xid = pg_current_xact_id_if_assigned() THEN 'own' END,
                        n.version, CASE WHEN n.pod = p_pod THEN n.memory END,
                        CASE WHEN n.pod = p_pod THEN n.used_memory END, NULL::numeric, NULL::jsonb, NULL::jsonb,
                        CASE WHEN n.pod = p_pod THEN n.cpu_map END, CASE WHEN n.pod = p_pod THEN n.numa END,
                        CASE WHEN n.pod = p_pod THEN n.numa_memory END,
                        CASE WHEN n.pod = p_pod THEN n.used_cpu_map END,
                        CASE WHEN n.pod = p_pod THEN n.used_numa_memory END
                   FROM nodes n
                  WHERE (p_since IS NULL AND n.pod = p_pod)
                     OR (p_since IS NOT NULL AND n.changed_xid >= p_since::xid8)
                     OR n.name = ANY (p_recheck);
    RETURN QUERY SELECT 'skip'::text, n.name, NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::bigint,
                        NULL::bigint, NULL::numeric, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb,
                        NULL::jsonb, NULL::jsonb, NULL::jsonb
                   FROM nodes n LEFT JOIN node_status s ON s.name = n.name
                  WHERE n.pod = p_pod
                    AND (n.state <> 'up' OR n.cordoned
                         OR s.heartbeat_at <= now() - make_interval(secs => p_down_after));
    RETURN QUERY SELECT 'forbid'::text, n.name, NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::bigint,
                        NULL::bigint, NULL::numeric, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb,
                        NULL::jsonb, NULL::jsonb, NULL::jsonb
                   FROM nodes n JOIN node_status s ON s.name = n.name
                  WHERE n.pod = p_pod
                    AND (s.conditions -> 'forbid_schedule_cpu' = 'true'::jsonb
                         OR s.conditions -> 'forbid_schedule_memory' = 'true'::jsonb);
    -- two queries, so that each keeps its plan on the partial index containers_live_workload (pod, workload, node)
    IF p_workloads IS NULL THEN
        RETURN QUERY SELECT 'count'::text, k.node, k.workload, NULL::text, NULL::text, count(*), NULL::bigint,
                            NULL::bigint, NULL::numeric, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb,
                            NULL::jsonb, NULL::jsonb, NULL::jsonb
                       FROM containers k
                      WHERE k.pod = p_pod AND k.state NOT IN ('removed', 'failed', 'lost')
                      GROUP BY k.workload, k.node;
    ELSE
        RETURN QUERY SELECT 'count'::text, k.node, k.workload, NULL::text, NULL::text, count(*), NULL::bigint,
                            NULL::bigint, NULL::numeric, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb,
                            NULL::jsonb, NULL::jsonb, NULL::jsonb
                       FROM containers k
                      WHERE k.pod = p_pod AND k.workload = ANY (p_workloads)
                        AND k.state NOT IN ('removed', 'failed', 'lost')
                      GROUP BY k.workload, k.node;
    END IF;
    RETURN QUERY SELECT 'reservation'::text, r.node, r.tenant, NULL::text, NULL::text, r.memory, NULL::bigint,
                        NULL::bigint, r.cpu, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb,
                        NULL::jsonb, NULL::jsonb
                   FROM tenant_reservations r JOIN nodes n ON n.name = r.node
                  WHERE n.pod = p_pod;
    RETURN QUERY SELECT 'tenant'::text, t.name, NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::bigint,
                        NULL::bigint, t.weight, t.quota, t.limits, NULL::jsonb, NULL::jsonb, NULL::jsonb,
                        NULL::jsonb, NULL::jsonb
                   FROM tenants t ORDER BY t.name;
END;
$$;

-- the same after the pod's lock taken at the session level (as migration 0170 for 0160's function)
CREATE FUNCTION eru_lock_and_open_deploy_batch_since(
    p_lock bigint, p_pod text, p_keys text[], p_workloads text[], p_down_after double precision,
    p_since text, p_recheck text[]
) RETURNS TABLE (
    part text, name text, t1 text, t2 text, t3 text, n1 bigint, n2 bigint, n3 bigint, num numeric,
    j1 jsonb, j2 jsonb, j3 jsonb, j4 jsonb, j5 jsonb, j6 jsonb, j7 jsonb
)
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_lock(p_lock);
    RETURN QUERY SELECT * FROM eru_open_deploy_batch_since(NULL, p_pod, p_keys, p_workloads, p_down_after,
                                                           p_since, p_recheck);
END;
$$;
