-- Settled requests expire (docs/operations.md "How long a request id is remembered"): a request id's outcome is
-- kept as long as any stream could still deliver that request again, then dropped with its whole partition
-- (eru.store.settled_retention), like the history tables of 0045. The table is partitioned by when each row may be
-- forgotten (`expires_at`), so a drop is "every partition that ended before now".

-- How long an outcome is kept, written by the allocator from its settings at start (eru.store.settled_retention):
-- accepted = the deploy stream's max age + the deploy consumer's redelivery; dead-lettered = the dead-letter
-- stream's max age (a redrive republishes the request) + the accepted window. Until an allocator writes it, the
-- defaults of a 7-day retention.
CREATE TABLE settle_windows (
    singleton              boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    accepted_seconds       double precision NOT NULL CHECK (accepted_seconds > 0),
    dead_lettered_seconds  double precision NOT NULL CHECK (dead_lettered_seconds > 0),
    updated_at             timestamptz NOT NULL DEFAULT now()
);
INSERT INTO settle_windows (accepted_seconds, dead_lettered_seconds) VALUES (605550, 3024750);

ALTER TABLE settled_requests RENAME TO settled_requests_before_retention;
CREATE TABLE settled_requests (
    request_id text        NOT NULL,
    kind       text        NOT NULL,
    outcome    text        NOT NULL CHECK (outcome IN ('accepted', 'dead_lettered')),
    deploy_id  text,
    reason     text,
    settled_at timestamptz NOT NULL DEFAULT now(),
    message_id text,
    expires_at timestamptz NOT NULL
) PARTITION BY RANGE (expires_at);
CREATE TABLE settled_requests_default PARTITION OF settled_requests DEFAULT;
-- The rows so far are kept for the dead-letter window from now (nothing says how old their stream messages are).
-- They land in the default partition and move into their time partition when the retention pass creates it.
-- A one-time copy (one short row per request ever made): the only way to give them a place in the new ranges.
INSERT INTO settled_requests (request_id, kind, outcome, deploy_id, reason, settled_at, message_id, expires_at)
SELECT request_id, kind, outcome, deploy_id, reason, settled_at, message_id, now() + make_interval(secs => 3024750)
  FROM settled_requests_before_retention;
DROP TABLE settled_requests_before_retention;
-- A request id may have several rows (a dead letter, then the client's retry accepted): the accepted one wins,
-- then the newest (eru_allocator.settled). No unique key: a partitioned table's keys must hold `expires_at`.
CREATE INDEX settled_requests_request ON settled_requests (request_id, settled_at);

-- When a row of `request_id` with this outcome may be forgotten: its window from now, and never before an earlier
-- row of the same request (a dead letter's longer window carries over to the accepted row that follows it).
CREATE FUNCTION eru_settle_expiry(request text, outcome text) RETURNS timestamptz
    LANGUAGE sql STABLE AS $$
    SELECT greatest(
        now() + make_interval(secs => CASE WHEN outcome = 'dead_lettered' THEN w.dead_lettered_seconds
                                           ELSE w.accepted_seconds END),
        (SELECT max(s.expires_at) FROM settled_requests s WHERE s.request_id = request))
      FROM settle_windows w
$$;

CREATE OR REPLACE FUNCTION eru_settle_deploy() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO settled_requests (request_id, kind, outcome, deploy_id, expires_at)
    VALUES (NEW.request_id, 'deploy', 'accepted', NEW.id, eru_settle_expiry(NEW.request_id, 'accepted'));
    RETURN NEW;
END
$$;
