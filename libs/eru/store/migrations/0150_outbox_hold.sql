-- Rows the committing process publishes itself (docs/store.md "Publishing after the commit"): a transaction may
-- insert its outbox rows *held* (`held_until` a few seconds ahead); the relays do not claim a held row until its
-- hold has passed, and the inserting process publishes the rows right after its COMMIT (Nats-Msg-Id = event_id, as
-- the relay does) and then marks them published. If that process dies between the commit and the mark, a relay
-- publishes the rows once the hold has passed, and JetStream drops any duplicate within its duplicate window
-- (120 s, far longer than a hold): nothing is lost, nothing is stored twice.
ALTER TABLE outbox ADD COLUMN held_until timestamptz;

-- Wake the relays only for rows they may claim now: a statement that inserted only held rows (a deploy batch, an
-- events batch publishing its own rows) wakes nobody, so the relay does not run an empty claim after every batch.
CREATE FUNCTION eru_outbox_notify_unheld() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM added WHERE held_until IS NULL) THEN
        PERFORM pg_notify('eru_outbox', '');
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION eru_outbox_notify_unheld();
DROP FUNCTION eru_outbox_notify();
