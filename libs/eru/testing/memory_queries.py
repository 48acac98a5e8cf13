"""The queries capability (`eru.store.queries.QueryStore`) in memory, mixed into `InMemoryStore`
(eru.testing.memory_store): the same answers as PostgreSQL's `PgQueries` (the contract suite,
tests/integration/store/test_queries_contract.py, runs both) over the rows the other capabilities keep.

What the deploy path's rows do not carry is taken from beside them: a container's reason and last change from the
container events capability's state (`MemoryEventState`), and creation times stamped with the store's clock (`now`,
seconds after `EPOCH`) when a row is first read. Rows written by one transaction share a creation time in PostgreSQL
too, and both order ties by id. The fake keeps no history (retention is PostgreSQL's): `deploy_history` is None and
`container_history` empty; a container's health is what its node last reported (`record_health`), but workload
groups count no instance unhealthy; no node has watermark overrides or a `version`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from eru.planning.decision_record import MAX_CHAIN, base_of, expand, merged, snapshot_of
from eru.planning.reservations import Amount
from eru.store.protocol import ContainerRow, DecisionRow, DecisionSnapshotRow, DeployRow
from eru.store.queries import (
    ContainerFilter,
    ContainerPlace,
    ContainerRecord,
    DeployOwner,
    DeployRecord,
    DeployView,
    ImageRun,
    NodeListing,
    PodCount,
    QueryStore,
    RecordedDecisionRow,
    WorkloadGroup,
    tenant_matches,
)
from eru.testing.memory_nodes import MemoryNodes

GONE = frozenset({"removed", "failed", "lost"})
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""The time the store's clock (`now`, seconds) counts from."""


@dataclass
class MemoryQueryState:
    """Creation times stamped on first read: (kind, id) → seconds on the store's clock."""

    created: dict[tuple[str, str], float] = field(default_factory=dict)


class MemoryQueries(MemoryNodes):
    """`QueryStore` over the store's `pods`, `nodes`, `containers`, `deploys` and `decisions` (see the module doc)."""

    now: float
    pods: dict[str, dict[str, Any]]
    reservations: dict[str, dict[str, Amount]]
    containers: dict[str, ContainerRow]
    deploys: dict[str, DeployRow]
    decisions: dict[str, DecisionRow]
    decision_snapshots: dict[str, DecisionSnapshotRow]

    @property
    def query_state(self) -> MemoryQueryState:
        """The capability's own state, made on first use."""
        state = self.__dict__.get("_query_state")
        if state is None:
            state = self.__dict__["_query_state"] = MemoryQueryState()
        assert isinstance(state, MemoryQueryState)
        return state

    def _created(self, kind: str, key: str) -> datetime:
        seconds = self.query_state.created.setdefault((kind, key), self.now)
        return EPOCH + timedelta(seconds=seconds)

    def _query_record(self, row: ContainerRow) -> ContainerRecord:
        created = self._created("container", row.id)
        changed = self.event_state.updated_at.get(row.id)
        return ContainerRecord(
            id=row.id,
            deploy_id=row.deploy_id,
            node=row.node,
            pod=row.pod,
            workload=row.workload,
            image=row.image,
            tenant=row.tenant,
            priority_class=row.priority_class,
            priority=row.priority,
            allocation=row.allocation,
            resources=row.resources,
            state=row.state,
            reason=self.event_state.reasons.get(row.id),
            labels=row.labels,
            previous_allocation=self.event_state.previous_allocations.get(row.id),
            replaces=row.replaces,
            created_at=created,
            updated_at=created if changed is None else max(created, EPOCH + timedelta(seconds=changed)),
            health=self.event_state.health.get(row.id),
        )

    async def node_page(
        self, pod: str | None, node: str | None, down_after_seconds: float, after: str | None, limit: int | None
    ) -> list[NodeListing]:
        """Nodes in name order with usage, reservations and live containers (no watermark overrides: the fake keeps
        none; `version` is 0)."""
        names = sorted(
            name
            for name, listed in self.nodes.items()
            if (pod is None or listed.pod == pod) and (node is None or name == node) and (after is None or name > after)
        )
        return [self._listing(name, down_after_seconds) for name in names[:limit]]

    def _listing(self, name: str, down_after_seconds: float) -> NodeListing:
        listed, state = self.nodes[name], self.node_state
        resources = listed.resources
        share_base = state.share_base.get(name, 100)
        agent_labels = state.agent_labels.get(name)
        operator_labels = dict(state.operator_labels.get(name, {}))
        beat = self.event_state.heartbeats.get(name)
        live = [row for row in self.containers.values() if row.node == name and row.state not in GONE]
        requests = Counter(row.resources for row in live if row.replaces is None)
        reserved = self.reservations.get(name, {})
        return NodeListing(
            name=name,
            pod=listed.pod,
            cpu_map=dict(resources.cpu_map),
            memory=resources.memory,
            numa=dict(resources.numa),
            numa_memory=dict(resources.numa_memory),
            used_cpu_map=dict(resources.used_cpu_map),
            used_memory=resources.used_memory,
            used_numa_memory=dict(resources.used_numa_memory),
            labels=dict(agent_labels if agent_labels is not None else listed.labels),
            state=listed.state,
            cordoned=listed.cordoned,
            share_base=share_base,
            heartbeat_at=None if beat is None else EPOCH + timedelta(seconds=beat),
            version=0,
            conditions=dict(listed.conditions),
            operator_labels=operator_labels,
            containers=len(live),
            silent=beat is not None and beat <= self.now - down_after_seconds,
            reserved_cpu=float(sum(amount.cpu for amount in reserved.values()) / share_base),
            reserved_memory=sum(amount.memory for amount in reserved.values()),
            reserved_for=",".join(sorted(reserved)),
            requests=[(json.loads(text), count) for text, count in requests.items()],
            watermark_overrides={"node": None, "pod": None},
        )

    async def pod_page(self, after: str | None, limit: int) -> list[PodCount]:
        """Pods in name order with their nodes counted."""
        names = sorted(name for name in self.pods if after is None or name > after)[:limit]
        counts = Counter(node.pod for node in self.nodes.values())
        cordoned = Counter(node.pod for node in self.nodes.values() if node.cordoned)
        return [PodCount(name, self._created("pod", name), counts[name], cordoned[name]) for name in names]

    async def container_page(
        self, which: ContainerFilter, after: tuple[str, datetime, str] | None, limit: int
    ) -> list[ContainerRecord]:
        """Containers in (node, created_at, id) order."""
        records = [
            self._query_record(row)
            for row in self.containers.values()
            if (which.pod is None or row.pod == which.pod)
            and (which.node is None or row.node == which.node)
            and (which.deploy_id is None or row.deploy_id == which.deploy_id)
            and (which.container_id is None or row.id == which.container_id)
            and (which.include_gone or row.state not in GONE)
            and tenant_matches(row.tenant, which.tenant)
        ]
        records.sort(key=lambda r: (r.node, r.created_at, r.id))
        if after is not None:
            records = [r for r in records if (r.node, r.created_at, r.id) > after]
        return records[:limit]

    def _deploy_of(self, key: str) -> DeployRow | None:
        found = self.deploys.get(key)
        if found is None:
            found = next((row for row in self.deploys.values() if row.request_id == key), None)
        return found

    async def deploy(self, key: str) -> DeployRecord | None:
        """The live deploy by id or request key."""
        row = self._deploy_of(key)
        if row is None:
            return None
        created = self._created("deploy", row.id)
        result = row.result if row.result else None
        return DeployRecord(
            row.id, row.request_id, row.pod, row.tenant, row.status, row.request, result, created, created
        )

    async def deploy_history(self, key: str) -> str | None:
        """None: the fake keeps no history."""
        return None

    async def container_history(self, deploy_id: str, limit: int) -> list[str]:
        """Empty: the fake keeps no history."""
        return []

    async def deploy_views(
        self, pod: str | None, limit: int, before: tuple[datetime, str] | None, tenant: str | None
    ) -> list[DeployView]:
        """The newest deploys with their containers counted by state."""
        keyed = [
            ((self._created("deploy", row.id), row.id), row)
            for row in self.deploys.values()
            if (pod is None or row.pod == pod) and tenant_matches(row.tenant, tenant)
        ]
        keyed = sorted((item for item in keyed if before is None or item[0] < before), reverse=True, key=lambda i: i[0])
        views = []
        for (created, _), row in keyed[:limit]:
            request = json.loads(row.request)
            result = json.loads(row.result) if row.result else {}
            workload = request.get("workload") or {}
            error = (result or {}).get("error") or {}
            states = Counter(c.state for c in self.containers.values() if c.deploy_id == row.id)
            views.append(
                DeployView(
                    id=row.id,
                    request_id=row.request_id,
                    pod=row.pod,
                    tenant=row.tenant,
                    status=row.status,
                    created_at=created,
                    updated_at=created,
                    decision_id=_text((result or {}).get("decision_id")),
                    workload=_text(workload.get("name")),
                    image=_text(workload.get("image")),
                    priority_class=_text(workload.get("priority_class")),
                    count=int(request.get("count") or 0),
                    error=_text(error.get("message")),
                    states=dict(states),
                )
            )
        return views

    async def workload_groups(
        self,
        pod: str | None,
        include_gone: bool,
        tenant: str | None,
        after: tuple[str, str, str] | None,
        limit: int,
    ) -> list[WorkloadGroup]:
        """Workloads grouped from their containers, by (pod, tenant, name)."""
        groups: dict[tuple[str, str, str], list[ContainerRow]] = {}
        for row in self.containers.values():
            wanted = (pod is None or row.pod == pod) and (include_gone or row.state not in GONE)
            if wanted and tenant_matches(row.tenant, tenant):
                groups.setdefault((row.pod, row.tenant, row.workload), []).append(row)
        keys = sorted(key for key in groups if after is None or key > after)[:limit]
        return [
            WorkloadGroup(
                pod=key[0],
                tenant=key[1],
                workload=key[2],
                images=sorted({row.image for row in groups[key]}),
                states=[row.state for row in groups[key]],
                deploys=len({row.deploy_id for row in groups[key]}),
                unhealthy=0,
                starting=0,
            )
            for key in keys
        ]

    async def image_runs(self, workload: str, pod: str | None, tenant: str | None) -> list[ImageRun]:
        """The images `workload` ran (live containers only: no history), by first use."""
        runs: dict[str, list[ContainerRecord]] = {}
        for row in self.containers.values():
            if row.workload == workload and (pod is None or row.pod == pod) and tenant_matches(row.tenant, tenant):
                runs.setdefault(row.image, []).append(self._query_record(row))
        found = [
            ImageRun(
                image,
                min(r.created_at for r in records),
                max(r.updated_at for r in records),
                len(records),
                sum(1 for r in records if r.state not in GONE),
            )
            for image, records in runs.items()
        ]
        return sorted(found, key=lambda run: (run.first_at, run.image))

    async def decision(self, decision_id: str) -> RecordedDecisionRow | None:
        """One recorded decision, its input and output decoded."""
        row = self.decisions.get(decision_id)
        if row is None:
            return None
        created = self._created("decision", row.id)
        return RecordedDecisionRow(row.id, row.kind, json.loads(row.input), json.loads(row.output), created)

    async def decision_expired_at(self, decision_id: str) -> datetime | None:
        """None: the fake keeps no history, so retention never dropped anything."""
        return None

    async def full_input(self, problem: Mapping[str, Any]) -> dict[str, Any]:
        """A compact input's snapshot chain put back from `decision_snapshots`."""
        return self.expanded(problem)

    def expanded(self, problem: Mapping[str, Any]) -> dict[str, Any]:
        """`full_input` without the wait (`eru.planning.decision_record`: a snapshot chain merged, then expanded)."""
        snapshots = self.decision_snapshots
        ref = snapshot_of(problem)
        if ref is None:
            return dict(problem)
        nodes = json.loads(snapshots[ref].nodes) if ref in snapshots else None
        if nodes is not None and base_of(nodes) is not None:  # a change of an earlier row (`SnapshotChain`)
            rows = [nodes]
            while (base := base_of(rows[-1])) in snapshots and len(rows) <= MAX_CHAIN:
                rows.append(json.loads(snapshots[base].nodes))
            nodes = merged(rows)
        return expand(problem, nodes)

    async def deploy_expired_at(self, deploy_id: str) -> datetime | None:
        """None: the fake keeps no history, so retention never dropped anything."""
        return None

    async def container_place(self, container_id: str, down_after_seconds: float) -> ContainerPlace | None:
        """The container's node and state; its node silent when its newest heartbeat is `down_after_seconds` old
        (a node that never beat is not silent)."""
        row = self.containers.get(container_id)
        if row is None:
            return None
        beat = self.event_state.heartbeats.get(row.node)
        silent_for = None if beat is None else self.now - beat
        silent = silent_for is not None and silent_for >= down_after_seconds
        return ContainerPlace(row.id, row.node, row.state, silent, silent_for)

    async def container_tenants(self, container_ids: Sequence[str]) -> dict[str, str]:
        """The tenants of the known containers of `container_ids`."""
        return {cid: self.containers[cid].tenant for cid in container_ids if cid in self.containers}

    async def deploy_owner(self, deploy_id: str, request_id: str | None) -> DeployOwner | None:
        """The deploy with id `deploy_id`, else the one with request key `request_id`."""
        for row in sorted(self.deploys.values(), key=lambda row: row.id != deploy_id):
            if row.id == deploy_id or row.request_id == request_id:
                return DeployOwner(row.id, row.tenant)
        return None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _conforms(store: MemoryQueries) -> QueryStore:
    """Where mypy checks that `MemoryQueries` is a `QueryStore`."""
    return store
