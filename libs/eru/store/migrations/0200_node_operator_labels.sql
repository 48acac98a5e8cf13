-- Labels an operator sets on a node (`eru node set NODE --label KEY=VALUE`, `--label KEY-` removes one; docs/cli.md),
-- kept beside the labels the node's agent reports (`labels`, rewritten at every registration): an agent
-- re-registering never wipes them. A node's effective labels, what deploy node filters match
-- (docs/placement-modes.md "Node filters") and `eru node ls` shows, are `labels || operator_labels`: the operator's
-- value wins for a key both have.
ALTER TABLE nodes ADD COLUMN operator_labels jsonb NOT NULL DEFAULT '{}'::jsonb
    CHECK (jsonb_typeof(operator_labels) = 'object');
