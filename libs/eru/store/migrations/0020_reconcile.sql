-- Reconciliation with the nodes (docs/operations.md "Reconciling the ledger"): a container the node no longer runs is
-- `lost` (gone: it holds nothing, like removed and failed), and each node's latest inventory is kept for
-- `eru reconcile`.
ALTER TABLE containers DROP CONSTRAINT containers_state_check;
ALTER TABLE containers ADD CONSTRAINT containers_state_check CHECK (
    state IN ('planned', 'creating', 'running', 'updating', 'paused', 'stopping', 'removed', 'failed', 'lost')
);
DROP INDEX containers_live_node;
DROP INDEX containers_live_tenant;
DROP INDEX containers_live_workload;
CREATE INDEX containers_live_node ON containers (node) WHERE state NOT IN ('removed', 'failed', 'lost');
CREATE INDEX containers_live_tenant ON containers (pod, tenant) WHERE state NOT IN ('removed', 'failed', 'lost');
CREATE INDEX containers_live_workload ON containers (pod, workload, node)
    WHERE state NOT IN ('removed', 'failed', 'lost');
DROP TRIGGER containers_admission_notify ON containers;
CREATE TRIGGER containers_admission_notify AFTER UPDATE OF state ON containers FOR EACH ROW
    WHEN (NEW.state IN ('removed', 'failed', 'lost') AND OLD.state NOT IN ('removed', 'failed', 'lost'))
    EXECUTE FUNCTION eru_admission_notify();

CREATE TABLE node_inventories (
    node        text             PRIMARY KEY,
    agent       text             NOT NULL,
    taken_at    double precision NOT NULL,
    received_at timestamptz      NOT NULL DEFAULT now(),
    body        jsonb            NOT NULL CHECK (jsonb_typeof(body) = 'object')
);
