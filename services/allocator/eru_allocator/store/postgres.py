"""`AllocatorStore` on PostgreSQL (docs/store.md "The allocator's store"): a pod session is one transaction holding
the pod's advisory lock (`eru.store.lock_pod`, across replicas); a deploy batch holds the lock at the session level
instead and runs no transaction of its own (docs/store.md "A deploy batch in two round trips"). `submit` writes a
batch in one statement (decisions, deploys, containers and outbox rows as unnest INSERTs; node rows locked in name
order and their usage changed relatively).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import asyncpg
import structlog
from asyncpg.pool import PoolConnectionProxy

from eru.domain import ResourceRequest
from eru.errors import InvalidInput
from eru.fairness import Tenant
from eru.fairness.drf import TenantUsage
from eru.fairness.tenant_config import tenant_from_row
from eru.planning import NodeResources, PlanningConfig, normalize_request
from eru.planning.snapshot import ClusterSnapshot, qos_mix
from eru.store import lock_pod, pod_lock_key, transaction
from eru.store.plans import Plan, PlanResult, total_usage
from eru.store.protocol import Conflict, PodWrites, SnapshotNeeds, StoredDeploy
from eru.store.transaction import Connection, NotInTransaction
from eru_allocator.store import accounting, batch_allowance, eviction_memory, reservations, sql, submit_plan, waiting
from eru_allocator.store.node_cache import NodeCache
from eru_allocator.store.outbox import queue_columns
from eru_allocator.store.settled import FIND_SQL as FIND_DEPLOYS_SQL
from eru_allocator.store.tenants import PgTenants
from eru_allocator.store.waiting import PgWaitSession

POD_COUNTS_SQL = """
SELECT workload, node, count(*) AS n FROM containers
 WHERE pod = $1 AND state NOT IN ('removed', 'failed', 'lost')
 GROUP BY workload, node
"""
# A deploy batch counts only its own workloads (`SnapshotNeeds.workloads`): the partial index containers_live_workload
# (pod, workload, node) answers it without reading the pod's other live containers.
WORKLOADS_COUNTS_SQL = """
SELECT workload, node, count(*) AS n FROM containers
 WHERE pod = $1 AND workload = ANY($2::text[]) AND state NOT IN ('removed', 'failed', 'lost')
 GROUP BY workload, node
"""
POD_RESOURCES_SQL = """
SELECT node, resources FROM containers WHERE pod = $1 AND state NOT IN ('removed', 'failed', 'lost')
"""
# then the pod's nodes left out, with their state (migration 0190), in the same round trip: the first function
# (taking the lock) is read whole before the second starts. The nodes come as the rows changed since the node
# cache's last read of the pod (migration 0220; 0160's `eru_open_deploy_batch` sends a row per node), and the nodes
# left out only from the second (migration 0230: one look at the pod's nodes, not two).
OPEN_BATCH_SQL = (
    "SELECT * FROM eru_open_deploy_batch_changes($1, $2, $3::text[], $4::text[], $5, $6, $7::text[])"
    f" UNION ALL {sql.LEFT_OUT_SQL.format(pod='$2', down_after='$5')}"
)
# the same reads after the pod's lock taken at the session level (migrations 0170, 0220, 0230)
LOCK_AND_OPEN_BATCH_SQL = (
    "SELECT * FROM eru_lock_and_open_deploy_batch_changes($1, $2, $3::text[], $4::text[], $5, $6, $7::text[])"
    f" UNION ALL {sql.LEFT_OUT_SQL.format(pod='$2', down_after='$5')}"
)
SESSION_LOCK_SQL = "SELECT pg_advisory_lock($1)"
SESSION_UNLOCK_SQL = "SELECT pg_advisory_unlock($1)"
UNLOCK_ALL_SQL = "SELECT pg_advisory_unlock_all()"
UNLOCK_TIMEOUT_SECONDS = 5.0  # an unlock not answered by then: the connection is closed, which releases the lock
INSERT_WAIT_SQL = """
INSERT INTO deploy_waits (deploy_id, request_key, pod, tenant, deadline, request, envelope, reason)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5), $6::jsonb, $7::jsonb, $8::jsonb)
"""


# The pod's policy as one more row beside FIND_DEPLOYS_SQL's (`is_pod`, the policy in `result`): the batch reads both
# after taking the pod's lock, in one round trip.
POLICY_AND_DEPLOYS_SQL = f"""
SELECT true AS is_pod, NULL::text AS id, NULL::text AS request_id, NULL::text AS status, policy AS result,
       NULL::text AS message_id
  FROM pods WHERE name = $2
UNION ALL
SELECT false, found.* FROM ({FIND_DEPLOYS_SQL}) AS found
"""


log = structlog.get_logger()


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _found(rows: Iterable[Any]) -> dict[str, StoredDeploy]:
    return {
        row["request_id"]: StoredDeploy(row["id"], row["request_id"], row["status"], row["result"], row["message_id"])
        for row in rows
    }


def _counts(rows: Iterable[Any]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        counts.setdefault(row["workload"], {})[row["node"]] = int(row["n"])
    return counts


class PgPodSession(PgWaitSession):
    """One pod under its advisory lock, inside the caller's transaction on `conn`. `locked=False`: the lock is taken
    by `open_batch`, or by any other verb called first (`PgStore.deploy_batch`). `session_lock=True`: that lock is
    the session-level one and no transaction is open (`submit` commits as it writes); whoever made the session
    releases it (`may_hold_lock` says whether it was asked for)."""

    def __init__(
        self,
        conn: Connection,
        pod: str,
        nodes: NodeCache | None = None,
        *,
        locked: bool = True,
        session_lock: bool = False,
    ) -> None:
        self.conn = conn
        self.pod = pod
        self.nodes = nodes if nodes is not None else NodeCache()
        self.locked = locked
        self.session_lock = session_lock
        self.may_hold_lock = False  # set before the session-level lock is asked for: held from then on, maybe

    async def _lock(self) -> None:
        if self.locked:
            return
        if self.session_lock:
            self.may_hold_lock = True
            await self.conn.execute(SESSION_LOCK_SQL, pod_lock_key(self.pod))
        else:
            await lock_pod(self.conn, self.pod)
        self.locked = True

    async def policy(self) -> Mapping[str, Any] | None:
        """The pod's policy object, None when the pod does not exist."""
        await self._lock()
        stored = await self.conn.fetchval("SELECT policy FROM pods WHERE name = $1", self.pod)
        if stored is None:
            return None
        policy = _loads(stored)
        return policy if isinstance(policy, dict) else {}

    async def pod_names(self, limit: int) -> list[str]:
        """Some pod names in name order."""
        await self._lock()
        return [row["name"] for row in await self.conn.fetch("SELECT name FROM pods ORDER BY name LIMIT $1", limit)]

    async def find_deploys(self, keys: Sequence[str]) -> dict[str, StoredDeploy]:
        """What each request key already ended in."""
        await self._lock()
        return _found(await self.conn.fetch(FIND_DEPLOYS_SQL, list(keys)))

    async def policy_and_deploys(self, keys: Sequence[str]) -> tuple[Mapping[str, Any] | None, dict[str, StoredDeploy]]:
        """`policy()` and `find_deploys(keys)` in one statement (one round trip fewer under the pod's lock)."""
        await self._lock()
        rows = await self.conn.fetch(POLICY_AND_DEPLOYS_SQL, list(keys), self.pod)
        pod = [row for row in rows if row["is_pod"]]
        if not pod:
            return None, _found(row for row in rows if not row["is_pod"])
        policy = _loads(pod[0]["result"])
        return (policy if isinstance(policy, dict) else {}), _found(row for row in rows if not row["is_pod"])

    async def open_batch(
        self, keys: Sequence[str], needs: SnapshotNeeds
    ) -> tuple[Mapping[str, Any] | None, dict[str, StoredDeploy], ClusterSnapshot]:
        """`policy_and_deploys(keys)` and `snapshot(needs)` in one round trip: `eru_open_deploy_batch` (migration
        0160, docs/store.md "A deploy batch's reads"); the rarer inputs (reservations' holdings, limits, score, batch)
        follow as in `snapshot`."""
        since, recheck = self.nodes.since(self.pod)
        workloads = None if needs.workloads is None else sorted(needs.workloads)
        lock = None if self.locked else pod_lock_key(self.pod)  # taken by the function, before its reads
        query = OPEN_BATCH_SQL
        if lock is not None and self.session_lock:
            query = LOCK_AND_OPEN_BATCH_SQL
            self.may_hold_lock = True
        elif lock is not None and not self.conn.is_in_transaction():
            raise NotInTransaction("open_batch takes the pod's lock: it needs a transaction")
        rows = await self.conn.fetch(
            query,
            lock,
            self.pod,
            list(keys),
            workloads,
            float(needs.down_after_seconds),
            since,
            recheck,
        )
        self.locked = True
        parts: dict[str, list[Any]] = {}
        for row in rows:
            parts.setdefault(row["part"], []).append(row)
        policy: Mapping[str, Any] | None = None
        if "pod" in parts:
            stored = _loads(parts["pod"][0]["j1"])
            policy = stored if isinstance(stored, dict) else {}
        existing = {
            row["name"]: StoredDeploy(row["t1"], row["name"], row["t2"], row["j1"], row["t3"])
            for row in parts.get("deploy", ())
        }
        nodes, forbid_batch = self.nodes.from_changes(self.pod, parts)
        counts: dict[str, dict[str, int]] = {}
        for row in parts.get("count", ()):
            counts.setdefault(row["t1"], {})[row["name"]] = int(row["n1"])
        reserved = [
            {"tenant": row["t1"], "node": row["name"], "cpu": row["num"], "memory": row["n1"]}
            for row in parts.get("reservation", ())
        ]
        holdings = await reservations.from_rows(self.conn, self.pod, reserved, needs.config)
        tenants = {
            row["name"]: tenant_from_row(row["name"], row["num"], _loads(row["j1"]), _loads(row["j2"]))
            for row in parts.get("tenant", ())
        }
        states = sql.left_out(parts.get("left_out", ()), parts.get("watermark", ()))
        snapshot = await self._assemble(needs, nodes, forbid_batch, counts, holdings, tenants, states)
        return policy, existing, snapshot

    async def snapshot(self, needs: SnapshotNeeds) -> ClusterSnapshot:
        """Nodes and live counts (of `needs.workloads`, or all); score inputs and batch allowances plus eviction memory
        when `needs` says so."""
        await self._lock()
        nodes, forbid_batch = await self.nodes.schedulable(self.conn, self.pod, needs.down_after_seconds)
        if needs.workloads is None:
            rows = await self.conn.fetch(POD_COUNTS_SQL, self.pod)
        else:
            rows = await self.conn.fetch(WORKLOADS_COUNTS_SQL, self.pod, sorted(needs.workloads))
        counts = _counts(rows)
        holdings = await reservations.load(self.conn, self.pod, needs.config)
        tenants = await accounting.load_tenants(self.conn)  # changed only by operators: once per batch
        states = await sql.nodes_left_out(self.conn, self.pod, needs.down_after_seconds)
        return await self._assemble(needs, nodes, forbid_batch, counts, holdings, tenants, states)

    async def _assemble(
        self,
        needs: SnapshotNeeds,
        nodes: Sequence[NodeResources],
        forbid_batch: frozenset[str],
        counts: dict[str, dict[str, int]],
        holdings: reservations.Fairness,
        tenants: dict[str, Tenant],
        states: sql.LeftOutStates,
    ) -> ClusterSnapshot:
        """The snapshot of what was read, with the inputs only some batches need read now."""
        unschedulable, marks = states
        snapshot = ClusterSnapshot(
            config=needs.config,
            nodes=tuple(nodes),
            counts=counts,
            forbid_batch=forbid_batch,
            watermarks={name: marks[name] for name in sorted(forbid_batch) if name in marks},
            unschedulable=unschedulable,
            reservations=holdings.reservations,
            held=holdings.held,
            tenants=tenants,
            pod=self.pod,
            counted=needs.workloads,
        )
        if holdings.reservations or any(t.limit or t.quota for t in tenants.values()):
            snapshot = replace(snapshot, tenant_usage=await accounting.held(self.conn, self.pod, needs.config))
        if needs.labels:  # a request of the batch has a node filter
            snapshot = replace(snapshot, labels=await sql.node_labels(self.conn, self.pod))
        if needs.score:
            snapshot = await self._with_score_inputs(snapshot, needs.config)
        if needs.batch:
            allowed = await batch_allowance.with_pod_allowances(self.conn, self.pod, snapshot.nodes, needs.config)
            evictions = await eviction_memory.load(self.conn, self.pod, needs.keep)
            snapshot = replace(snapshot, nodes=tuple(allowed), evictions=evictions)
        return snapshot

    async def _with_score_inputs(self, snapshot: ClusterSnapshot, config: PlanningConfig) -> ClusterSnapshot:
        """Mode `score`: the pod's scorer weights (`pods.policy.scorers`) and every node's live instances per QoS
        class (Kubernetes' classes, from each container's normalised requirement)."""
        policy = await self.policy() or {}
        weights = policy.get("scorers")
        pod_weights = {str(k): float(v) for k, v in weights.items()} if isinstance(weights, dict) else None
        placed = []
        for row in await self.conn.fetch(POD_RESOURCES_SQL, self.pod):
            try:
                need = normalize_request(ResourceRequest.model_validate(_loads(row["resources"])), config, "resources")
            except (InvalidInput, ValueError):
                continue  # a record from an older model: it does not count for QoS balance
            placed.append((row["node"], need))
        qos = qos_mix(placed)
        return replace(snapshot, qos=qos, pod_weights=pod_weights)

    async def tenant_usage(self, config: PlanningConfig) -> dict[str, TenantUsage]:
        """What each tenant and group holds in this pod."""
        await self._lock()
        return await accounting.held(self.conn, self.pod, config)

    async def has_waiting(self, *, lock: bool = True) -> bool:
        """Whether requests of this pod wait for admission (`lock=False`: without taking the pod's lock)."""
        if lock:
            await self._lock()
        return bool(await self.conn.fetchval("SELECT 1 FROM deploy_waits WHERE pod = $1 LIMIT 1", self.pod))

    async def peek_batch(
        self, keys: Sequence[str], needs: SnapshotNeeds
    ) -> tuple[Mapping[str, Any] | None, dict[str, StoredDeploy], ClusterSnapshot]:
        """`open_batch`'s reads without the pod's lock (`eru_open_deploy_batch` in its own implicit transaction)."""
        if self.locked:
            return await self.open_batch(keys, needs)
        self.locked = True  # no verb of the read takes the lock
        try:
            return await self.open_batch(keys, needs)
        finally:
            self.locked = False

    async def release(self) -> None:
        """Unlock the session-level lock (`pg_advisory_unlock`) if held; a transaction's lock is kept."""
        if self.session_lock and self.locked and self.may_hold_lock:
            await self.conn.execute(SESSION_UNLOCK_SQL, pod_lock_key(self.pod))
            self.locked = False
            self.may_hold_lock = False

    async def submit(self, writes: PodWrites) -> None:
        """Write the batch; `Conflict` when a request key was committed meanwhile (by a replica serving another
        pod's lock: `deploys.request_id` is unique). Outside a transaction (a session-level lock) the rows'
        statement commits by itself, and a batch with admission waits opens one for its three statements."""
        await self._lock()
        if writes.waits and not self.conn.is_in_transaction():
            async with self.conn.transaction():
                await self._write(writes)
        else:
            await self._write(writes)

    async def submit_plan(self, plan: Plan) -> PlanResult:
        """Write `plan` after re-checking the nodes it touches in the writing statement (store/submit_plan.py); the
        parts on a rejected node are dropped and the snapshot is read again after the commit. Outside a transaction
        (a session-level lock) each statement commits by itself; a plan with admission waits opens one."""
        await self._lock()
        if plan.writes.waits and not self.conn.is_in_transaction():
            async with self.conn.transaction():
                committed, rejected, written = await submit_plan.submit_checked(self.conn, plan, self._write_waits)
        else:
            committed, rejected, written = await submit_plan.submit_checked(self.conn, plan, self._write_waits)
        if not rejected:
            return PlanResult(committed, written=written)
        log.info("store.plan_rejected", pod=self.pod, rejected=rejected, committed=len(committed))
        return PlanResult(committed, rejected, await self.snapshot(plan.needs), written)

    async def _write_waits(self, writes: PodWrites) -> None:
        if writes.waits:
            await self.conn.executemany(INSERT_WAIT_SQL, writes.waits)
            await self.conn.execute("SELECT pg_notify($1, $2)", waiting.CHANNEL, self.pod)  # delivered at commit

    async def _write(self, writes: PodWrites) -> None:
        conn = self.conn
        # what the batch charges its nodes goes in the same statement (docs/store.md "A deploy batch's writes")
        totals = {name: total_usage(usages) for name, usages in writes.usage.items()}
        if writes.decisions or writes.deploys or writes.containers or writes.messages or totals:
            try:  # the rows in one statement (sql.INSERT_BATCH_ROWS_SQL)
                await conn.execute(
                    sql.INSERT_BATCH_ROWS_SQL,
                    *sql.columns(writes.decisions, sql.DECISION_COLUMNS),
                    *sql.columns(writes.deploys, sql.DEPLOY_COLUMNS),
                    *sql.columns(writes.containers, sql.CONTAINER_COLUMNS),
                    *queue_columns(writes.messages),
                    *sql.columns(writes.decision_snapshots, sql.SNAPSHOT_COLUMNS),
                    writes.hold_seconds,
                    *sql.usage_columns(totals),
                )
            except asyncpg.UniqueViolationError as error:
                if error.table_name == "containers":  # not a request key: as before, not a conflict to retry
                    raise
                raise Conflict("a request id of this batch was committed concurrently") from None
        if writes.waits:
            await conn.executemany(INSERT_WAIT_SQL, writes.waits)
            await conn.execute("SELECT pg_notify($1, $2)", waiting.CHANNEL, self.pod)  # delivered at commit


class PgStore(PgTenants):
    """The allocator's record in PostgreSQL (an `AllocatorStore`, and a `TenantStore` with `PgTenants`)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.nodes = NodeCache()  # parsed node rows, shared by the process's pod sessions
        self._unlocking: set[asyncio.Task[None]] = set()  # deploy batches' unlocks still on their way

    async def live_counts(self, pod: str, workloads: Collection[str]) -> dict[str, dict[str, int]]:
        """Live counts of `workloads` in `pod`, committed state, without the pod's lock."""
        return _counts(await self.pool.fetch(WORKLOADS_COUNTS_SQL, pod, sorted(workloads)))

    @asynccontextmanager
    async def pod(self, pod: str) -> AsyncIterator[PgPodSession]:
        """Lock `pod` in a new transaction for the block; committed at its end, rolled back on an exception."""
        async with transaction(self.pool) as conn:
            await lock_pod(conn, pod)
            yield PgPodSession(conn, pod, self.nodes)

    @asynccontextmanager
    async def deploy_batch(self, pod: str) -> AsyncIterator[PgPodSession]:
        """`pod` without a transaction, its lock taken at the session level by the session's first verb (`open_batch`
        in its own statement) and held until the block ends: `submit`, the batch's last verb, commits as it writes
        (docs/store.md "A deploy batch in two round trips"). A block that ends normally lets the lock go in the
        background, so the batch's answers do not wait for that round trip; one that raises releases it before it
        re-raises. A connection whose unlock fails is closed, which releases the lock with the session."""
        conn = await self.pool.acquire()
        session = PgPodSession(conn, pod, self.nodes, locked=False, session_lock=True)
        try:
            yield session
        except BaseException:
            await self._let_go(conn, session, UNLOCK_ALL_SQL)
            raise
        if not session.may_hold_lock:
            await self.pool.release(conn)
            return
        task = asyncio.create_task(self._let_go(conn, session, SESSION_UNLOCK_SQL, pod_lock_key(pod)))
        self._unlocking.add(task)
        task.add_done_callback(self._unlocking.discard)

    async def wait_unlocked(self) -> None:
        """Until every deploy batch that has ended has let its lock go (a clean stop, a count of statements)."""
        while self._unlocking:
            await asyncio.gather(*self._unlocking, return_exceptions=True)

    async def _let_go(
        self, conn: PoolConnectionProxy[asyncpg.Record], session: PgPodSession, query: str, *args: object
    ) -> None:
        """Release the session's lock (if it may hold it) and give the connection back to the pool."""
        try:
            if session.may_hold_lock:
                await asyncio.wait_for(conn.execute(query, *args), UNLOCK_TIMEOUT_SECONDS)
        except BaseException as error:
            conn.terminate()  # the session's locks end with it
            if not isinstance(error, Exception):
                raise
            log.warning("store.unlock_failed", pod=session.pod, error=str(error) or type(error).__name__)
        finally:
            await self.pool.release(conn)
