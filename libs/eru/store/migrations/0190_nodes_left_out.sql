-- The pod's nodes a deploy decision may not use, with their state (docs/planning.md "Nodes left out"), read in the
-- batch's one round trip after `eru_open_deploy_batch` (migration 0160, unchanged: a replica of the previous version
-- keeps calling it alone during a rolling upgrade). Same row shape as that function:
--   'left_out'    name; j1 = {"cordoned": bool, "down": bool, "silent_seconds": int or null}: a node of the pod
--                 that is cordoned, marked down or whose agent is silent past `p_down_after` seconds
--   'watermark'   name; j1 = the forbid fields of its newest condition (forbid_schedule_cpu / _memory,
--                 cpu_percent, memory_percent, watermarks): a node whose condition forbids new batch instances
-- VOLATILE: each query reads what was committed when it starts (after the lock the batch's first function took).
CREATE FUNCTION eru_nodes_left_out(p_pod text, p_down_after double precision) RETURNS TABLE (
    part text, name text, t1 text, t2 text, t3 text, n1 bigint, n2 bigint, n3 bigint, num numeric,
    j1 jsonb, j2 jsonb, j3 jsonb, j4 jsonb, j5 jsonb, j6 jsonb, j7 jsonb
)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY SELECT 'left_out'::text, n.name, NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::bigint,
                        NULL::bigint, NULL::numeric,
                        jsonb_build_object(
                            'cordoned', n.cordoned, 'down', n.state <> 'up',
                            'silent_seconds', CASE WHEN s.heartbeat_at <= now() - make_interval(secs => p_down_after)
                                                   THEN floor(extract(epoch FROM now() - s.heartbeat_at))::bigint END),
                        NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb
                   FROM nodes n LEFT JOIN node_status s ON s.name = n.name
                  WHERE n.pod = p_pod
                    AND (n.state <> 'up' OR n.cordoned
                         OR s.heartbeat_at <= now() - make_interval(secs => p_down_after));
    RETURN QUERY SELECT 'watermark'::text, n.name, NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::bigint,
                        NULL::bigint, NULL::numeric,
                        jsonb_build_object(
                            'forbid_schedule_cpu', s.conditions -> 'forbid_schedule_cpu',
                            'forbid_schedule_memory', s.conditions -> 'forbid_schedule_memory',
                            'cpu_percent', s.conditions -> 'cpu_percent',
                            'memory_percent', s.conditions -> 'memory_percent',
                            'watermarks', s.conditions -> 'watermarks'),
                        NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb
                   FROM nodes n JOIN node_status s ON s.name = n.name
                  WHERE n.pod = p_pod
                    AND (s.conditions -> 'forbid_schedule_cpu' = 'true'::jsonb
                         OR s.conditions -> 'forbid_schedule_memory' = 'true'::jsonb);
END;
$$;
