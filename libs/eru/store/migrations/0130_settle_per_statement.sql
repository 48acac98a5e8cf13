-- A deploy's request id is settled by one statement per INSERT into deploys, not one trigger call per row
-- (docs/store.md "Settled requests"): the allocator inserts a whole batch's deploys in one statement, and the
-- row trigger of 0070 (a PL/pgSQL call, `eru_settle_expiry` and a one-row INSERT per deploy) was about a tenth of
-- that statement's time. Same rows as before: each new deploy's request id, accepted, expiring after the accepted
-- window and never before an earlier row of the same request id (a dead letter's longer window carries over).
-- Two deploys of one statement never share a request id (`deploys.request_id` is unique), so no row of the batch
-- needs to see another's.
CREATE FUNCTION eru_settle_deploys() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO settled_requests (request_id, kind, outcome, deploy_id, expires_at)
    SELECT n.request_id, 'deploy', 'accepted', n.id,
           greatest(now() + make_interval(secs => w.accepted_seconds),
                    (SELECT max(s.expires_at) FROM settled_requests s WHERE s.request_id = n.request_id))
      FROM inserted n LEFT JOIN settle_windows w ON true;  -- no window row: NULL, refused as before
    RETURN NULL;
END
$$;

DROP TRIGGER deploys_settle ON deploys;
CREATE TRIGGER deploys_settle AFTER INSERT ON deploys REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION eru_settle_deploys();
DROP FUNCTION eru_settle_deploy();
