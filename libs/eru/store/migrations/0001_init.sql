-- eru's record of current state (docs/store.md). JSON columns are jsonb; maps of core id / NUMA id → amount are
-- JSON objects whose values must be non-negative numbers.

CREATE FUNCTION eru_nonnegative_number_map(value jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    -- CASE, not AND: the strict path would raise on a non-object, and AND does not promise evaluation order.
    RETURN CASE WHEN jsonb_typeof(value) = 'object'
                THEN NOT jsonb_path_exists(value, 'strict $.* ? (@.type() != "number" || @ < 0)')
                ELSE false END;

CREATE FUNCTION eru_touch_updated_at() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;

CREATE TABLE pods (
    name        text        PRIMARY KEY CHECK (name <> ''),
    policy      jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(policy) = 'object'),
    watermarks  jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(watermarks) = 'object'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE nodes (
    name              text        PRIMARY KEY CHECK (name <> ''),
    pod               text        NOT NULL REFERENCES pods (name),
    cpu_map           jsonb       NOT NULL DEFAULT '{}' CHECK (eru_nonnegative_number_map(cpu_map)),
    memory            bigint      NOT NULL CHECK (memory >= 0),
    numa              jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(numa) = 'object'),
    numa_memory       jsonb       NOT NULL DEFAULT '{}' CHECK (eru_nonnegative_number_map(numa_memory)),
    used_cpu_map      jsonb       NOT NULL DEFAULT '{}' CHECK (eru_nonnegative_number_map(used_cpu_map)),
    used_memory       bigint      NOT NULL DEFAULT 0 CHECK (used_memory >= 0),
    used_numa_memory  jsonb       NOT NULL DEFAULT '{}' CHECK (eru_nonnegative_number_map(used_numa_memory)),
    labels            jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object'),
    state             text        NOT NULL DEFAULT 'up' CHECK (state IN ('up', 'down')),
    cordoned          boolean     NOT NULL DEFAULT false,
    conditions        jsonb       NOT NULL DEFAULT '{}',
    share_base        integer     NOT NULL DEFAULT 100 CHECK (share_base > 0),
    heartbeat_at      timestamptz,
    version           bigint      NOT NULL DEFAULT 0 CHECK (version >= 0),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX nodes_pod ON nodes (pod);
CREATE TRIGGER nodes_touch BEFORE UPDATE ON nodes FOR EACH ROW EXECUTE FUNCTION eru_touch_updated_at();

CREATE TABLE tenants (
    name        text        PRIMARY KEY CHECK (name <> ''),
    weight      numeric     NOT NULL DEFAULT 1 CHECK (weight > 0),
    -- guaranteed share per resource, e.g. {"cpu": 4, "memory": 8589934592}
    quota       jsonb       NOT NULL DEFAULT '{}' CHECK (eru_nonnegative_number_map(quota)),
    -- the most the tenant may hold per resource; NULL means no limit ("limit" is a reserved word in SQL)
    limits      jsonb       CHECK (limits IS NULL OR eru_nonnegative_number_map(limits)),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE deploys (
    id          text        PRIMARY KEY,
    request_id  text        NOT NULL UNIQUE,
    pod         text        NOT NULL,
    tenant      text        NOT NULL,
    status      text        NOT NULL CHECK (status <> ''),
    request     jsonb       NOT NULL,
    result      jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deploys_pod_status ON deploys (pod, status);
CREATE INDEX deploys_tenant ON deploys (tenant);
CREATE TRIGGER deploys_touch BEFORE UPDATE ON deploys FOR EACH ROW EXECUTE FUNCTION eru_touch_updated_at();

CREATE TABLE containers (
    id          text        PRIMARY KEY,
    deploy_id   text        REFERENCES deploys (id),
    node        text        NOT NULL REFERENCES nodes (name),
    pod         text        NOT NULL,
    workload    text        NOT NULL,
    image       text        NOT NULL,
    tenant      text        NOT NULL,
    class       text        NOT NULL CHECK (class IN ('prod', 'mid', 'batch')),
    priority    integer     NOT NULL DEFAULT 0,
    -- the concrete allocation: {"cpu_map": {core: pieces}, "numa_node": id or null, "memory": bytes}
    allocation  jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(allocation) = 'object'),
    -- what the workload asked for: requests and limits (docs/planning.md, Requests)
    resources   jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(resources) = 'object'),
    state       text        NOT NULL CHECK (
        state IN ('planned', 'creating', 'running', 'updating', 'paused', 'stopping', 'removed', 'failed')
    ),
    reason      text,
    labels      jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX containers_deploy ON containers (deploy_id);
-- live containers per node and per tenant: node usage rebuilds, evictions, DRF shares
CREATE INDEX containers_live_node ON containers (node) WHERE state NOT IN ('removed', 'failed');
CREATE INDEX containers_live_tenant ON containers (pod, tenant) WHERE state NOT IN ('removed', 'failed');
CREATE TRIGGER containers_touch BEFORE UPDATE ON containers FOR EACH ROW EXECUTE FUNCTION eru_touch_updated_at();

-- Transactional outbox: rows are written in the same transaction as the state change they announce, and relayed to
-- JetStream with Nats-Msg-Id = event_id.
CREATE TABLE outbox (
    id            bigserial   PRIMARY KEY,
    event_id      text        NOT NULL UNIQUE CHECK (event_id <> ''),
    subject       text        NOT NULL CHECK (subject <> ''),
    headers       jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    body          bytea       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz
);
CREATE INDEX outbox_pending ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Wake relays (LISTEN eru_outbox) when outbox rows commit; NOTIFY is delivered at commit and identical
-- notifications within one transaction are folded into one.
CREATE FUNCTION eru_outbox_notify() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('eru_outbox', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox FOR EACH STATEMENT EXECUTE FUNCTION eru_outbox_notify();

-- Idempotent consumers: one row per (consumer, message id) already processed.
CREATE TABLE inbox (
    consumer      text        NOT NULL,
    message_id    text        NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX inbox_processed_at ON inbox (processed_at);

-- Every decision with its full input, so it can be re-run offline (docs/replay.md).
CREATE TABLE decisions (
    id          text        PRIMARY KEY,
    kind        text        NOT NULL CHECK (kind <> ''),
    input       jsonb       NOT NULL,
    output      jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX decisions_kind_created ON decisions (kind, created_at);
