-- Two-level tenants and per-node reservations (docs/fairness-and-scoring.md, seed 004).
--
-- Groups are rows of `tenants` named TENANT/GROUP (a weight only: quota and limit live on the tenant); a tenant with
-- groups cannot be removed while they exist.
ALTER TABLE tenants ADD COLUMN parent text REFERENCES tenants (name);
ALTER TABLE tenants ADD CONSTRAINT tenants_group_name CHECK (
    (parent IS NULL AND position('/' in name) = 0) OR (parent IS NOT NULL AND name LIKE parent || '/%'));
ALTER TABLE tenants ADD CONSTRAINT tenants_group_weight_only CHECK (
    parent IS NULL OR (quota = '{}'::jsonb AND (limits IS NULL OR limits = '{}'::jsonb)));

-- Resources of one node held for one tenant: placed only for that tenant's workloads (its groups' too) and counted
-- toward its quota, used or not. `cpu` in cores, `memory` in bytes.
CREATE TABLE tenant_reservations (
    tenant     text        NOT NULL REFERENCES tenants (name),
    node       text        NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    cpu        numeric     NOT NULL DEFAULT 0 CHECK (cpu >= 0),
    memory     bigint      NOT NULL DEFAULT 0 CHECK (memory >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, node)
);
CREATE INDEX tenant_reservations_node ON tenant_reservations (node);
