-- A container an operator stopped (`eru container stop`, `eru workload stop`; docs/cli.md "Workloads") is `stopped`:
-- it is not running on its node but keeps its allocation (it holds its cores and memory like a running one, as in
-- Eru), so that `start` finds them there. It is live: every `NOT IN ('removed', 'failed', 'lost')` counts it.
ALTER TABLE containers DROP CONSTRAINT containers_state_check;
ALTER TABLE containers ADD CONSTRAINT containers_state_check CHECK (
    state IN ('planned', 'creating', 'running', 'updating', 'paused', 'stopping', 'stopped', 'removed', 'failed', 'lost')
);
