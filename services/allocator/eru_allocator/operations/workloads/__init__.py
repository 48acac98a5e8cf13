"""Workloads and containers as a unit (docs/cli.md "Workloads"): stop, start, restart, dissociate and remove a
container or every instance of a workload, and the workloads' read view; the lookup and authorization in front of
`eru container logs`, `eru exec` and `eru run` (docs/node-agent.md "Logs and exec"); for operators and, confined to
their own, for tenants."""
