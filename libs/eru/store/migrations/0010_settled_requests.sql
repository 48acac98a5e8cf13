-- At-most-once effects for all time (docs/store.md "Settled requests"): every deploy request id is settled here,
-- permanently, in the transaction that made the deploy (a trigger on deploys), or when its message was
-- dead-lettered. A replayed stream, a re-created consumer or a redelivery finds the id and does nothing twice, even
-- after retention has pruned the deploy row. One short row per request: the id, what became of it, the deploy.
CREATE TABLE settled_requests (
    request_id text PRIMARY KEY,
    kind       text NOT NULL,
    outcome    text NOT NULL CHECK (outcome IN ('accepted', 'dead_lettered')),
    deploy_id  text,
    reason     text,
    settled_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION eru_settle_deploy() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO settled_requests (request_id, kind, outcome, deploy_id)
    VALUES (NEW.request_id, 'deploy', 'accepted', NEW.id)
    ON CONFLICT (request_id) DO UPDATE
        SET outcome = 'accepted', deploy_id = EXCLUDED.deploy_id, reason = NULL, settled_at = now();
    RETURN NEW;
END
$$;

CREATE TRIGGER deploys_settle AFTER INSERT ON deploys FOR EACH ROW EXECUTE FUNCTION eru_settle_deploy();

INSERT INTO settled_requests (request_id, kind, outcome, deploy_id, settled_at)
SELECT request_id, 'deploy', 'accepted', id, created_at FROM deploys
ON CONFLICT (request_id) DO NOTHING;
