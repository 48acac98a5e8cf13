"""Workloads and containers as a unit (docs/cli.md "Workloads"): stop, start, restart, dissociate and remove a
container or every instance of a workload, and the workloads' read view; for operators and, confined to their own,
for tenants."""
