"""The fault suite: `python -m bench.faults [--short]` (docs/reliability.md).

It starts its own stack (`eru up --detach` on free ports with sim nodes), sends bursts of deploys while it injects
faults, and prints JSON figures per scenario: requests sent, answered ok, answered with an error, lost (no outcome),
deployed twice, allocation-invariant violations, unsettled messages and seconds to recover.
"""
