-- A batch of container events opens in ONE round trip (docs/store.md "Container events in two statements"):
-- the inbox marks, then the row locks in the fixed order (deploys by id, then the containers by id, then the
-- replaced containers by id), then the members of the deploys still planned. The statements run one after the
-- other inside the function, so the lock order is exactly that of the separate statements it replaces.
--
-- Rows come back tagged by `part`:
--   'fresh'  id = a message id not seen before (only its events are applied)
--   'deploy' id, state = status, allocation = result -> 'placements' (locked)
--   'row'    a container row (locked), every column the state machine reads
--   'member' id, deploy_id, state, reason of each container of a still planned deploy (not a replacement)
CREATE FUNCTION eru_open_event_batch(
    p_consumer text, p_messages text[], p_containers text[], p_container_messages text[]
) RETURNS TABLE (
    part text, id text, deploy_id text, node text, state text, reason text, allocation jsonb,
    previous_allocation jsonb, resources jsonb, replaces text, tenant text
)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_fresh text[];
    v_ids text[];
    v_deploys text[];
BEGIN
    WITH marked AS (
        INSERT INTO inbox (consumer, message_id) SELECT p_consumer, unnest(p_messages)
        ON CONFLICT (consumer, message_id) DO NOTHING RETURNING message_id
    )
    SELECT coalesce(array_agg(message_id), '{}') INTO v_fresh FROM marked;
    RETURN QUERY SELECT 'fresh'::text, f, NULL::text, NULL::text, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb,
                        NULL::jsonb, NULL::text, NULL::text
                   FROM unnest(v_fresh) AS f;
    SELECT coalesce(array_agg(DISTINCT u.c ORDER BY u.c), '{}') INTO v_ids
      FROM unnest(p_containers, p_container_messages) AS u (c, m)
     WHERE u.m = ANY (v_fresh);
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    SELECT coalesce(array_agg(DISTINCT c.deploy_id), '{}') INTO v_deploys
      FROM containers c
     WHERE (c.id = ANY (v_ids) OR c.replaces = ANY (v_ids)) AND c.deploy_id IS NOT NULL;
    RETURN QUERY SELECT 'deploy'::text, d.id, NULL::text, NULL::text, d.status, NULL::text, d.result -> 'placements',
                        NULL::jsonb, NULL::jsonb, NULL::text, NULL::text
                   FROM deploys d
                  WHERE d.id = ANY (v_deploys)
                  ORDER BY d.id FOR NO KEY UPDATE;
    RETURN QUERY SELECT 'row'::text, c.id, c.deploy_id, c.node, c.state, c.reason, c.allocation,
                        c.previous_allocation, c.resources, c.replaces, c.tenant
                   FROM containers c
                  WHERE c.id = ANY (v_ids) OR (c.replaces = ANY (v_ids) AND c.state IN ('planned', 'creating'))
                  ORDER BY c.id FOR NO KEY UPDATE;
    RETURN QUERY SELECT 'row'::text, c.id, c.deploy_id, c.node, c.state, c.reason, c.allocation,
                        c.previous_allocation, c.resources, c.replaces, c.tenant
                   FROM containers c
                  WHERE c.id IN (
                          SELECT r.replaces FROM containers r
                           WHERE (r.id = ANY (v_ids) OR (r.replaces = ANY (v_ids) AND r.state IN ('planned', 'creating')))
                             AND r.replaces IS NOT NULL AND NOT r.replaces = ANY (v_ids)
                        )
                  ORDER BY c.id FOR NO KEY UPDATE;
    RETURN QUERY SELECT 'member'::text, c.id, c.deploy_id, NULL::text, c.state, c.reason, NULL::jsonb, NULL::jsonb,
                        NULL::jsonb, NULL::text, NULL::text
                   FROM containers c
                  WHERE c.deploy_id IN (SELECT d.id FROM deploys d WHERE d.id = ANY (v_deploys) AND d.status = 'planned')
                    AND c.replaces IS NULL;
END;
$$;
