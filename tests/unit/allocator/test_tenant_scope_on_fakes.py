"""A tenant's requests confined to its own containers and deploys (docs/security.md), and one recorded decision
shown to an operator (`query decision`), on the in-memory store's queries capability
(`eru.store.queries.QueryStore`; the contract suite holds the fake to PostgreSQL's answers)."""

from __future__ import annotations

import json

import pytest

from eru.domain.messages import QueryRequest
from eru.errors import InvalidInput, NotFound, PermissionDenied
from eru.store.protocol import ContainerRow, DecisionRow, DecisionSnapshotRow, DeployRow
from eru.testing.memory_store import InMemoryStore
from eru_allocator.delivery.settled import scoped_request_id
from eru_allocator.operations.read_views import decision_view
from eru_allocator.operations.tenant_scope import check_owned, scope_query


def _container(cid: str, tenant: str) -> ContainerRow:
    return ContainerRow(cid, "d1", "n1", "p1", "w", "busybox", tenant, "prod", 0, "{}", "{}", "running", "{}", None)


def _store() -> InMemoryStore:
    store = InMemoryStore()
    for row in (_container("c1", "acme"), _container("c2", "acme/web"), _container("c3", "other")):
        store.containers[row.id] = row
    request_id = scoped_request_id("acme", "mine")
    store.deploys["d1"] = DeployRow("d1", request_id, "p1", "acme", "planned", "{}", "{}")
    store.deploys["d2"] = DeployRow("d2", "theirs", "p1", "other", "planned", "{}", "{}")
    return store


async def test_a_tenant_names_only_its_own_containers_and_the_refusal_names_the_field() -> None:
    store = _store()
    await check_owned(store, "acme", ["c1", "c2"])  # its own and its group's
    with pytest.raises(PermissionDenied) as caught:
        await check_owned(store, "acme", ["c1", "c3", "c9"])
    assert caught.value.details["field"] == "container_ids[1]"
    assert "'c3' is not a container of tenant 'acme'" in caught.value.message
    with pytest.raises(PermissionDenied) as unknown:
        await check_owned(store, "acme", ["c9"], field="container_id")
    assert unknown.value.details["field"] == "container_id"  # an unknown id reads as another tenant's


async def test_a_tenants_query_is_scoped_to_its_deploys_and_containers() -> None:
    store = _store()
    by_key = await scope_query(store, "acme", QueryRequest(what="deploy", deploy_id="mine"))
    assert by_key.deploy_id == "d1"  # its request key, scoped to the tenant, names its deploy
    with pytest.raises(PermissionDenied) as caught:
        await scope_query(store, "acme", QueryRequest(what="deploy", deploy_id="d2"))
    assert caught.value.details["field"] == "deploy_id"
    with pytest.raises(PermissionDenied) as other:
        await scope_query(store, "acme", QueryRequest(what="containers", container_id="c3"))
    assert other.value.details["field"] == "container_id"
    with pytest.raises(PermissionDenied):
        await scope_query(store, "acme", QueryRequest(what="decision", decision_id="x"))


async def test_a_recorded_decision_is_shown_with_its_snapshot_put_back() -> None:
    store = _store()
    node = {"name": "n1", "cpu_map": {"0": 100}, "memory": 1024}
    compact = {"snapshot": "s1", "snapshot_counts": {"n1": 1}, "nodes": ["n1"], "requests": []}
    store.decisions["dec-1"] = DecisionRow("dec-1", "deploy", json.dumps(compact), json.dumps({"placed": 1}))
    store.decision_snapshots["s1"] = DecisionSnapshotRow("s1", json.dumps({"n1": node}))
    shown = await decision_view(store, "dec-1")
    assert (shown["id"], shown["output"]) == ("dec-1", {"placed": 1})
    assert shown["input"] == {"nodes": [{**node, "count": 1}], "requests": []}
    with pytest.raises(NotFound) as unknown:
        await decision_view(store, "dec-9")
    assert "unknown decision 'dec-9'" in unknown.value.message
    with pytest.raises(InvalidInput) as missing:
        await decision_view(store, None)
    assert missing.value.field == "decision_id"
