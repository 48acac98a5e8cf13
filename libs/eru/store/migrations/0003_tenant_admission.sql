-- Tenants in the allocator (docs/fairness-and-scoring.md): the default tenant, and deploy requests waiting
-- for capacity (DeployRequest.wait_seconds > 0), admitted in hierarchical DRF order by whichever replica holds the
-- pod's lock.

INSERT INTO tenants (name, weight) VALUES ('default', 1) ON CONFLICT (name) DO NOTHING;

-- One row per waiting deploy (its `deploys` row has status 'waiting'); deleted when it is admitted, refused or its
-- wait expires. `arrival` orders a tenant's requests (and breaks DRF ties); `deadline` = arrival time + wait_seconds.
CREATE TABLE deploy_waits (
    deploy_id   text        PRIMARY KEY,
    request_key text        NOT NULL,
    pod         text        NOT NULL,
    tenant      text        NOT NULL,
    arrival     bigserial   NOT NULL,
    deadline    timestamptz NOT NULL,
    request     jsonb       NOT NULL,
    envelope    jsonb       NOT NULL CHECK (jsonb_typeof(envelope) = 'object'),
    reason      jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deploy_waits_pod ON deploy_waits (pod, arrival);

-- Wake the replicas' admission loops (LISTEN eru_admission, payload = pod) when capacity frees in a pod that has
-- waiting requests: a container gives its resources back, or a node appears, grows, comes back or is uncordoned.
CREATE FUNCTION eru_admission_notify() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM deploy_waits WHERE pod = NEW.pod) THEN
        PERFORM pg_notify('eru_admission', NEW.pod);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER containers_admission_notify AFTER UPDATE OF state ON containers FOR EACH ROW
    WHEN (NEW.state IN ('removed', 'failed') AND OLD.state NOT IN ('removed', 'failed'))
    EXECUTE FUNCTION eru_admission_notify();
CREATE TRIGGER nodes_admission_notify_insert AFTER INSERT ON nodes FOR EACH ROW
    EXECUTE FUNCTION eru_admission_notify();
CREATE TRIGGER nodes_admission_notify_update AFTER UPDATE ON nodes FOR EACH ROW
    WHEN (NEW.cpu_map IS DISTINCT FROM OLD.cpu_map OR NEW.memory IS DISTINCT FROM OLD.memory
          OR NEW.cordoned IS DISTINCT FROM OLD.cordoned OR NEW.state IS DISTINCT FROM OLD.state
          OR NEW.pod IS DISTINCT FROM OLD.pod OR NEW.used_memory < OLD.used_memory)
    EXECUTE FUNCTION eru_admission_notify();
