-- A deploy batch looks at each node of its pod once for what leaves a node out (docs/store.md "Node changes"):
-- `eru_open_deploy_batch_since` (migration 0220, unchanged: a replica of the previous version keeps calling it
-- during a rolling upgrade) sent the pod's unschedulable nodes ('skip') and batch-forbidden ones ('forbid'), and
-- `eru_nodes_left_out` (migration 0190), read in the same round trip, the same two sets again with their state
-- ('left_out', 'watermark'): four scans of the pod's nodes joined with node_status per batch, ~20 ms at 5,000
-- nodes. `eru_open_deploy_batch_changes` is 0220's function without 'skip' and 'forbid' (the allocator takes them
-- from 'left_out' and 'watermark'), and the nodes whose newest condition forbids batch instances are found by a
-- partial index instead of parsing every node's condition.
CREATE INDEX node_status_forbids_batch ON node_status (name)
    WHERE conditions -> 'forbid_schedule_cpu' = 'true'::jsonb
       OR conditions -> 'forbid_schedule_memory' = 'true'::jsonb;

-- Parts as 0220's `eru_open_deploy_batch_since` ('pod', 'deploy', 'horizon', 'node', 'count', 'reservation',
-- 'tenant'), without 'skip' and 'forbid'.
CREATE FUNCTION eru_open_deploy_batch_changes(
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

-- the same after the pod's lock taken at the session level (as 0220's for its function)
CREATE FUNCTION eru_lock_and_open_deploy_batch_changes(
    p_lock bigint, p_pod text, p_keys text[], p_workloads text[], p_down_after double precision,
    p_since text, p_recheck text[]
) RETURNS TABLE (
    part text, name text, t1 text, t2 text, t3 text, n1 bigint, n2 bigint, n3 bigint, num numeric,
    j1 jsonb, j2 jsonb, j3 jsonb, j4 jsonb, j5 jsonb, j6 jsonb, j7 jsonb
)
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_lock(p_lock);
    RETURN QUERY SELECT * FROM eru_open_deploy_batch_changes(NULL, p_pod, p_keys, p_workloads, p_down_after,
                                                             p_since, p_recheck);
END;
$$;
