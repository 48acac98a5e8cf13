"""Operating a tenant's workloads once they run: the lookup and authorization in front of `eru container logs`,
`eru exec` and `eru run` (docs/node-agent.md "Logs and exec")."""
