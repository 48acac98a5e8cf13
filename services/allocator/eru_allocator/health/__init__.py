"""Workloads you can operate (docs/node-agent.md "Health and node TTL"): nodes whose heartbeats stopped for their
TTL lose their containers (`down.py`), containers' health reports reach the ledger (`reports.py`)."""
