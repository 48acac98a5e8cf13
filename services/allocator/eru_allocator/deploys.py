"""Deploy requests (docs/pipeline.md): validate, lock the pod, snapshot, capacities, distributor, concrete plans, ONE
commit.

The idempotency key is the client's `request_id`, or the request message's envelope id (stable across redeliveries),
so a redelivery, a client retry or a replica that died between commit and ack finds the deploy already made and
answers with it; `deploys.request_id` is unique, so two replicas can never both commit one key.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import structlog
from pydantic import BaseModel

from eru import telemetry
from eru.bus import Envelope, Retryable, new_envelope, new_id
from eru.bus.subjects import deploy_event
from eru.colocation.backoff import KeepConfig
from eru.domain import (
    Accepted,
    DeployEvent,
    DeployRequest,
    ErrorReply,
    ResourceRequest,
)
from eru.errors import EruError, InvalidInput, PlanningFailure
from eru.fairness import Tenant
from eru.plan_api import deploy_answer
from eru.planning import (
    ContainerPlan,
    NodeResources,
    NormalizedRequest,
    PlanningConfig,
    charge,
    normalize_request,
)
from eru.planning.batch import charge_batch_placements
from eru.planning.capacity import analyse_nodes, check_placements, materialize_analysed, slots_from_analyses
from eru.planning.explain import explain_failure
from eru.planning.modes import get_mode
from eru.planning.scorers.from_resources import deploy_score_options
from eru.planning.scorers.qos import qos_class
from eru.podsecurity import PodPolicy, check_workload, parse_policy
from eru.store import lock_pod, transaction
from eru.store.transaction import Connection
from eru_allocator import batch_allowance, eviction_memory, records, reservations, waiting
from eru_allocator.batching import Batcher
from eru_allocator.creates import PlannedCommand, command_messages, create_containers
from eru_allocator.keeper import check_keep
from eru_allocator.outbox import queue_many
from eru_allocator.placing import DIRECT, Placer, PredictingPlacer, decision_input
from eru_allocator.settled import FIND_SQL as FIND_DEPLOYS_SQL
from eru_allocator.settled import is_fresh_retry

log = structlog.get_logger()

POD_COUNTS_SQL = """
SELECT workload, node, count(*) AS n FROM containers
 WHERE pod = $1 AND state NOT IN ('removed', 'failed', 'lost')
 GROUP BY workload, node
"""


@dataclass(frozen=True)
class Context:
    """What a deploy needs from the running service."""

    pool: Any
    nc: Any
    config: PlanningConfig
    source: str
    place_timeout_seconds: float
    node_down_after_seconds: float
    keep: KeepConfig = field(default_factory=KeepConfig)  # eviction memory back-offs (docs/colocation.md)


def validate(request: DeployRequest, config: PlanningConfig) -> NormalizedRequest:
    """Checks that need no state: count bound, known mode, normalised resources (`InvalidInput` naming the field)."""
    if request.count > config.max_deploy_count:
        raise InvalidInput(
            "count",
            f"{request.count} is above max_deploy_count {config.max_deploy_count}",
            count=request.count,
            max_deploy_count=config.max_deploy_count,
        )
    get_mode(request.mode)
    normalized = normalize_request(request.workload.resources, config, "workload.resources")
    batch = batch_allowance.is_batch(request)
    check_keep(request, batch)
    return dataclasses.replace(normalized, batch=batch)


def answer_for_existing(deploy_id: str | None, status: str, result: Any, key: str = "") -> Accepted | EruError:
    """What a repeated request is answered: the deploy it made, or the error it ended in before anything started
    (a request dead-lettered earlier is refused until an operator redrives it)."""
    stored = json.loads(result) if isinstance(result, str) else (result or {})
    if status == "settled:dead_lettered" or deploy_id is None:
        reason = stored.get("reason") if isinstance(stored, dict) else None
        return EruError(
            f"request {key} was dead-lettered ({reason or 'no reason recorded'}); `eru dlq redrive` re-submits it",
            code="dead_lettered",
            request_id=key,
        )
    error = stored.get("error") if isinstance(stored, dict) else None
    if status == "failed" and isinstance(error, dict) and stored.get("rejected"):
        return EruError(
            error.get("message", "failed"),
            code=error.get("code", "error"),
            deploy_id=deploy_id,
            **error.get("details", {}),
        )
    return Accepted(deploy_id=deploy_id)


Item = tuple[DeployRequest, NormalizedRequest, Envelope]


async def deploy(
    ctx: Context, req: DeployRequest, envelope: Envelope, batcher: Batcher[Item, Accepted | EruError]
) -> Accepted | EruError:
    """Plan and commit one request; returns the answer for the client (an `EruError` is an error reply).

    Requests for one pod that arrive together are committed together (`commit_batch`). Raises `Retryable` when the
    distributor cannot be reached: nothing is committed and the request comes back.
    """
    try:
        normalized = validate(req, ctx.config)
    except InvalidInput as error:
        return error
    return await batcher.submit(req.pod, (req, normalized, envelope))


class PodPlan:
    """One pod's state inside a batch transaction: the snapshot, updated in memory as requests are planned, and
    everything to write at commit."""

    def __init__(
        self, nodes: list[NodeResources], counts: dict[tuple[str, str], int], forbid_batch: frozenset[str]
    ) -> None:
        self.nodes = nodes
        self.forbid_batch = forbid_batch
        self.qos: dict[str, dict[str, int]] | None = None  # node → QoS class → live instances (mode score)
        self.pod_weights: dict[str, float] | None = None
        self.counts = counts  # (workload, node) → live instances
        self.decisions: list[tuple[Any, ...]] = []
        self.deploys: list[tuple[Any, ...]] = []
        self.containers: list[tuple[Any, ...]] = []
        self.messages: list[tuple[str, BaseModel, Envelope]] = []
        self.commands: dict[str, list[PlannedCommand]] = {}  # node → its creates in this batch, one message at commit
        self.placer: Placer = DIRECT
        self.usage: dict[str, list[records.Usage]] = {}
        self.fragments: dict[str, tuple[NodeResources, str]] = {}
        self.distributor_seconds = 0.0
        self.tenants: dict[str, Tenant] | None = None  # read once per batch (waiting.plan_or_wait)
        self.fairness: Any = None  # the pod's reservations, loaded once per batch (reservations.ensure)
        self.evictions: eviction_memory.PodMemory | None = None  # batch requests only (eviction_memory.py)

    def charge(self, plans: list[ContainerPlan], workload: str) -> None:
        by_node: dict[str, list[ContainerPlan]] = {}
        for plan in plans:
            by_node.setdefault(plan.node, []).append(plan)
            self.counts[(workload, plan.node)] = self.counts.get((workload, plan.node), 0) + 1
        self.nodes = [charge(node, by_node[node.name]) if node.name in by_node else node for node in self.nodes]


class _Mispredicted(Exception):
    """The distributor answered a batch's placements differently than predicted: plan the batch again."""


async def commit_batch(ctx: Context, pod: Hashable, items: Sequence[Item]) -> list[Accepted | EruError]:
    """Plan every request of the batch in arrival order, each against the pod as the previous ones left it, and
    commit them all in ONE transaction under the pod lock, with one distributor request for the whole batch
    (`PredictingPlacer`; one per request when a prediction was wrong)."""
    pod_name = str(pod)
    started = time.perf_counter()
    try:
        async with transaction(ctx.pool) as conn:
            await lock_pod(conn, pod_name)
            stored_policy = await conn.fetchval("SELECT policy FROM pods WHERE name = $1", pod_name)
            if stored_policy is None:
                known = [row["name"] for row in await conn.fetch("SELECT name FROM pods ORDER BY name LIMIT 20")]
                error = InvalidInput("pod", f"unknown pod {pod_name!r} (known: {', '.join(known) or 'none'})")
                return [error for _ in items]
            policy_object = _loads(stored_policy) or {}
            try:
                # the pod's policy object: security keys (eru.podsecurity) plus the score mode's `scorers` weights
                policy = parse_policy({k: v for k, v in policy_object.items() if k != "scorers"})
            except InvalidInput as error:
                return [error for _ in items]
            keys = [req.request_id or envelope.id for req, _, envelope in items]
            existing = {row["request_id"]: row for row in await conn.fetch(FIND_DEPLOYS_SQL, keys)}
            try:
                async with conn.transaction():  # a savepoint: planning again starts from the same rows
                    placer = PredictingPlacer()
                    answers, state = await _plan_batch(ctx, conn, pod_name, items, keys, existing, policy, placer)
                    differs = await placer.confirm(ctx)
                    if differs is not None:
                        raise _Mispredicted(differs)
            except _Mispredicted as mispredicted:
                log.warning("deploy.batch_mispredicted", pod=pod_name, ask=mispredicted.args[0], requests=len(items))
                answers, state = await _plan_batch(ctx, conn, pod_name, items, keys, existing, policy, DIRECT)
            planned = time.perf_counter()
            await _write(conn, state)
        telemetry.ALLOCATIONS.labels(pod_name).inc(len(state.containers))  # counted once committed
        log.debug(
            "deploy.batch",
            pod=pod_name,
            requests=len(items),
            plan_seconds=round(planned - started, 4),
            distributor_seconds=round(state.distributor_seconds, 4),
            total_seconds=round(time.perf_counter() - started, 4),
        )
    except asyncpg.UniqueViolationError:
        # a key committed meanwhile by another replica (another pod's lock): the retry answers with what it made
        raise Retryable("a request id of this batch was committed concurrently; retrying", delay=0.1) from None
    return answers


async def _plan_batch(
    ctx: Context,
    conn: Connection,
    pod_name: str,
    items: Sequence[Item],
    keys: list[str],
    existing: Mapping[str, Any],
    policy: PodPolicy,
    placer: Placer,
) -> tuple[list[Accepted | EruError], PodPlan]:
    """The pod's snapshot, then every request planned in order against it (nothing written yet). A request the
    placement finds invalid is answered alone; the others go on."""
    nodes, forbid_batch = await records.schedulable_nodes(conn, pod_name, ctx.node_down_after_seconds)
    counts = {(r["workload"], r["node"]): int(r["n"]) for r in await conn.fetch(POD_COUNTS_SQL, pod_name)}
    state = PodPlan(nodes, counts, forbid_batch)
    state.placer = placer
    if any(req.mode == "score" for req, _, _ in items):
        await _load_score_inputs(conn, pod_name, state, ctx.config)
    if any(normalized.batch for _, normalized, _ in items):
        await batch_allowance.load(conn, pod_name, state, ctx.config)
        state.evictions = await eviction_memory.load(conn, pod_name, ctx.keep)
    answers: list[Accepted | EruError] = []
    made: dict[str, Accepted | EruError] = {}
    for (req, normalized, envelope), key in zip(items, keys, strict=True):
        if key in existing and not is_fresh_retry(existing[key], envelope):
            row = existing[key]
            answers.append(answer_for_existing(row["id"], row["status"], row["result"], key))
        elif (refusal := _refused_by_policy(req, policy, pod_name)) is not None:
            answers.append(refusal)
        elif key in made:
            answers.append(made[key])
        else:
            try:
                made[key] = await waiting.plan_or_wait(ctx, conn, state, req, normalized, envelope, key, _plan_one)
            except InvalidInput as error:  # this request alone: nothing of it was recorded
                log.warning("deploy.invalid", pod=pod_name, field=error.field, reason=error.reason)
                made[key] = error
            answers.append(made[key])
    return answers, state


def _refused_by_policy(req: DeployRequest, policy: PodPolicy, pod: str) -> InvalidInput | None:
    """The pod policy's refusal of the workload (privileges, host access, image allow-list), if any."""
    try:
        check_workload(req.workload, policy, pod)
    except InvalidInput as error:
        return error
    return None


async def _load_score_inputs(conn: Connection, pod: str, state: PodPlan, config: PlanningConfig) -> None:
    """For mode `score`: the pod's scorer weights (`pods.policy.scorers`) and every node's live instances per QoS
    class (Kubernetes' classes, from each container's normalised requirement)."""
    policy = _loads(await conn.fetchval("SELECT policy FROM pods WHERE name = $1", pod)) or {}
    weights = policy.get("scorers")
    state.pod_weights = {str(k): float(v) for k, v in weights.items()} if isinstance(weights, dict) else None
    state.qos = {}
    rows = await conn.fetch(
        "SELECT node, resources FROM containers WHERE pod = $1 AND state NOT IN ('removed', 'failed', 'lost')", pod
    )
    for row in rows:
        try:
            need = normalize_request(ResourceRequest.model_validate(_loads(row["resources"])), config, "resources")
        except (InvalidInput, ValueError):
            continue  # a record from an older model: it does not count for QoS balance
        cls = qos_class(need.cpu_request, need.cpu_limit, need.memory_request, need.memory_limit)
        per_node = state.qos.setdefault(row["node"], {})
        per_node[cls] = per_node.get(cls, 0) + 1


def _plain_value(value: Any) -> Any:
    """JSON for the planning core's option objects (`NodeLoad` dataclasses, read-only mappings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def _write(conn: Connection, state: PodPlan) -> None:
    if state.decisions:
        await conn.executemany(records.INSERT_DECISION_SQL, state.decisions)
    if state.deploys:
        await conn.executemany(records.INSERT_DEPLOY_SQL, state.deploys)
    if state.containers:
        await conn.executemany(records.INSERT_CONTAINER_SQL, state.containers)
    for name in sorted(state.usage):  # node rows locked in name order: no deadlock between replicas
        await records.change_usage(conn, name, records.total_usage(state.usage[name]), 1)
    await queue_many(conn, [*state.messages, *command_messages(state.commands)])


async def _plan_one(
    ctx: Context,
    state: PodPlan,
    req: DeployRequest,
    normalized: NormalizedRequest,
    envelope: Envelope,
    key: str,
    deploy_id: str | None = None,
) -> Accepted | EruError:
    deploy_id = deploy_id or new_id()  # given when a waiting request is admitted (waiting.py, admission.py)
    decision_id = new_id()
    nodes = state.nodes
    if req.workload.priority_class == "batch" and state.forbid_batch:
        nodes = [node for node in nodes if node.name not in state.forbid_batch]
    memory = eviction_memory.for_request(state.evictions, req.workload.name) if normalized.batch else None
    nodes = eviction_memory.nodes_left(nodes, memory)
    counts = {node.name: state.counts.get((req.workload.name, node.name), 0) for node in nodes}
    counts = {name: n for name, n in counts.items() if n}
    recorded = nodes
    # other tenants' unused reservations are not this request's to use; recorded as "withheld" for replay
    nodes, withheld = reservations.visible_nodes(state, req.workload.tenant, nodes, ctx.config)
    analyses = analyse_nodes(nodes, normalized, ctx.config)
    slots = slots_from_analyses(nodes, analyses, normalized, counts)
    options = dict(req.options)
    if req.mode == "score" and nodes:
        # the scorers see the nodes' real resources and QoS mix; recorded in the decision, so it replays as is
        built = deploy_score_options(nodes, normalized, req.options, pod_weights=state.pod_weights, qos=state.qos)
        options = json.loads(json.dumps(built, default=_plain_value))
    problem = decision_input(ctx.config, req, recorded, counts, state.fragments, options, withheld)
    problem = eviction_memory.recorded(problem, memory)
    try:
        if not nodes:
            raise PlanningFailure(
                f"pod {req.pod!r} has no schedulable node (all cordoned, down or none registered)",
                code="no_schedulable_node",
                pod=req.pod,
            )
        try:
            asked = time.perf_counter()
            try:
                placements = await state.placer.place(ctx, req, slots, envelope, options)
            finally:
                state.distributor_seconds += time.perf_counter() - asked
        except PlanningFailure as refused:
            # the same explanation as the pure planner gives (`eru plan`): which resource was short, per node
            raise explain_failure(refused, nodes, analyses, normalized, ctx.config) from None
        check_placements(nodes, placements)
        plans = materialize_analysed(nodes, analyses, normalized, placements)
    except PlanningFailure as failure:
        state.decisions.append((decision_id, "deploy", problem, json.dumps({"error": failure.to_dict()})))
        error = ErrorReply(code=failure.code, message=failure.message, details=_plain(failure.details))
        result = {"rejected": True, "decision_id": decision_id, "error": error.model_dump(mode="json")}
        state.deploys.append(
            (deploy_id, key, req.pod, req.workload.tenant, "failed", req.model_dump_json(), json.dumps(result))
        )
        failed = DeployEvent(deploy_id=deploy_id, kind="failed", error=error, decision_id=decision_id)
        state.messages.append(
            (deploy_event(deploy_id, "failed"), failed, _event_envelope(ctx, "failed", deploy_id, envelope))
        )
        log.info("deploy.failed", deploy_id=deploy_id, pod=req.pod, code=failure.code, reason=failure.message)
        return PlanningFailure(failure.message, code=failure.code, deploy_id=deploy_id, **failure.details)
    output = eviction_memory.answered(
        deploy_answer({slot.name: slot.capacity for slot in slots}, placements, plans), memory
    )
    state.decisions.append((decision_id, "deploy", problem, json.dumps(output)))
    status = "planned" if plans else "completed"
    state.deploys.append(
        (
            deploy_id,
            key,
            req.pod,
            req.workload.tenant,
            status,
            req.model_dump_json(),
            json.dumps({"placements": placements, "decision_id": decision_id}),
        )
    )
    creates = create_containers(req, normalized, plans, deploy_id, ctx.config, ctx.source, envelope)
    state.containers += creates.rows
    for node, commands in creates.commands.items():
        state.commands.setdefault(node, []).extend(commands)
    for node, usage in creates.usage.items():
        state.usage.setdefault(node, []).extend(usage)
    planned = DeployEvent(deploy_id=deploy_id, kind="planned", placements=placements, decision_id=decision_id)
    state.messages.append(
        (deploy_event(deploy_id, "planned"), planned, _event_envelope(ctx, "planned", deploy_id, envelope))
    )
    if not plans:
        done = DeployEvent(deploy_id=deploy_id, kind="completed", decision_id=decision_id)
        state.messages.append(
            (deploy_event(deploy_id, "completed"), done, _event_envelope(ctx, "completed", deploy_id, envelope))
        )
    state.charge(plans, req.workload.name)
    if normalized.batch:
        state.nodes = charge_batch_placements(state.nodes, normalized, placements)  # the next request sees it
    if state.qos is not None:
        cls = qos_class(
            normalized.cpu_request, normalized.cpu_limit, normalized.memory_request, normalized.memory_limit
        )
        for plan in plans:
            per_node = state.qos.setdefault(plan.node, {})
            per_node[cls] = per_node.get(cls, 0) + 1
    log.info("deploy.planned", deploy_id=deploy_id, pod=req.pod, placements=placements)
    return Accepted(deploy_id=deploy_id)


def _event_envelope(ctx: Context, kind: str, deploy_id: str, cause: Envelope) -> Envelope:
    return new_envelope(f"eru.deploy.{kind}", ctx.source, correlation_id=deploy_id, causation=cause)


def _plain(details: dict[str, Any]) -> dict[str, Any]:
    plain: dict[str, Any] = json.loads(json.dumps(details, default=str))
    return plain
