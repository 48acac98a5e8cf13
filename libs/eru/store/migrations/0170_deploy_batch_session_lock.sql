-- A deploy batch holds its pod's lock at the SESSION level (docs/store.md "A deploy batch in two round trips"): the
-- batch reads in one statement, writes in one statement that commits by itself, and only then lets the lock go, so
-- neither BEGIN nor COMMIT is a round trip it waits for. `eru_open_deploy_batch` (migration 0160, unchanged for a
-- replica of the previous version during a rolling upgrade) takes the transaction-level lock; this one waits for
-- the session-level lock (`pg_advisory_lock`, the same key: the two kinds exclude each other across sessions) and
-- then returns exactly what 0160's function returns. The caller must release it (`pg_advisory_unlock`) or end the
-- session: unlike a transaction-level lock it outlives a rolled-back statement.
--
-- The reads come after the lock is granted: each query of the inner VOLATILE function takes its own snapshot when it
-- starts, so it sees everything the previous holder committed before it let the lock go.
CREATE FUNCTION eru_lock_and_open_deploy_batch(
    p_lock bigint, p_pod text, p_keys text[], p_workloads text[], p_down_after double precision,
    p_cached_names text[], p_cached_xmins text[], p_cached_versions bigint[]
) RETURNS TABLE (
    part text, name text, t1 text, t2 text, t3 text, n1 bigint, n2 bigint, n3 bigint, num numeric,
    j1 jsonb, j2 jsonb, j3 jsonb, j4 jsonb, j5 jsonb, j6 jsonb, j7 jsonb
)
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_lock(p_lock);
    RETURN QUERY SELECT * FROM eru_open_deploy_batch(NULL, p_pod, p_keys, p_workloads, p_down_after,
                                                     p_cached_names, p_cached_xmins, p_cached_versions);
END;
$$;
