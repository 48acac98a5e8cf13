-- A deploy batch reads what it decides against in ONE round trip (docs/store.md "A deploy batch's reads"): the
-- pod's policy, what its request keys already ended in, the pod's schedulable nodes (every column only for the
-- rows the caller has not parsed at this version), the live counts of the batch's workloads (NULL: all), the pod's
-- reservations and every tenant. It used to take six statements after the pod's lock, and the lock a seventh: with
-- `p_lock` (the pod's lock key, eru.store.pod_lock_key) the function takes the pod's advisory lock first (NULL: the
-- caller holds it). It is VOLATILE, so each query below reads what was committed when it starts, after the lock.
--
-- Rows come back tagged by `part`:
--   'pod'         name; j1 = policy                        (no row: the pod does not exist)
--   'deploy'      name = request key; t1 = deploy id, t2 = status, t3 = message id; j1 = result
--   'node'        name; t1 = xmin, n1 = version; j1, j2 = conditions forbid_schedule_cpu / _memory; when the
--                 (name, xmin, version) is not one the caller passed, t2 = 'full' and the row itself: j3 = cpu_map,
--                 n2 = memory, j4 = numa, j5 = numa_memory, j6 = used_cpu_map, n3 = used_memory,
--                 j7 = used_numa_memory
--   'count'       name = node; t1 = workload; n1 = live instances
--   'reservation' name = node; t1 = tenant; num = cpu; n1 = memory
--   'tenant'      name; num = weight; j1 = quota; j2 = limits
CREATE FUNCTION eru_open_deploy_batch(
    p_lock bigint, p_pod text, p_keys text[], p_workloads text[], p_down_after double precision,
    p_cached_names text[], p_cached_xmins text[], p_cached_versions bigint[]
) RETURNS TABLE (
    part text, name text, t1 text, t2 text, t3 text, n1 bigint, n2 bigint, n3 bigint, num numeric,
    j1 jsonb, j2 jsonb, j3 jsonb, j4 jsonb, j5 jsonb, j6 jsonb, j7 jsonb
)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
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
    RETURN QUERY SELECT 'node'::text, n.name, n.xmin::text, CASE WHEN c.name IS NULL THEN 'full' END, NULL::text,
                        n.version, CASE WHEN c.name IS NULL THEN n.memory END, CASE WHEN c.name IS NULL THEN
                        n.used_memory END, NULL::numeric, s.conditions -> 'forbid_schedule_cpu',
                        s.conditions -> 'forbid_schedule_memory', CASE WHEN c.name IS NULL THEN n.cpu_map END,
                        CASE WHEN c.name IS NULL THEN n.numa END, CASE WHEN c.name IS NULL THEN n.numa_memory END,
                        CASE WHEN c.name IS NULL THEN n.used_cpu_map END,
                        CASE WHEN c.name IS NULL THEN n.used_numa_memory END
                   FROM nodes n
                   LEFT JOIN node_status s ON s.name = n.name
                   LEFT JOIN unnest(p_cached_names, p_cached_xmins, p_cached_versions) AS c (name, xmin, version)
                          ON c.name = n.name AND c.xmin = n.xmin::text AND c.version = n.version
                  WHERE n.pod = p_pod AND n.state = 'up' AND NOT n.cordoned
                    AND (s.heartbeat_at IS NULL OR s.heartbeat_at > now() - make_interval(secs => p_down_after));
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
