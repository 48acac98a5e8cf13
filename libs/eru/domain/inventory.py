"""A node's inventory (what its engine really runs) and the reconcile verb's request (docs/node-agent.md,
docs/operations.md "Reconciling the ledger with the nodes")."""

from __future__ import annotations

from pydantic import Field

from eru.domain.resources import Frozen, Name

MAX_INVENTORY_CONTAINERS = 20_000


class InventoryEntry(Frozen):
    """One container on a node's engine with the resources the engine applies to it.

    `container_id` is eru's id for a container eru made (labels `eru.managed`, `eru.container_id`), else the engine's
    name; `node` is its `eru.node` label ("" when it is not eru's). Resources are the engine's own values: Docker's
    HostConfig `CpusetCpus`, `CpuShares`, `CpuQuota` (0 or -1 = none), `Memory` (0 = none)."""

    container_id: str = Field(min_length=1, max_length=256)
    managed: bool = False
    node: str = ""
    state: str = Field(default="running", max_length=32)
    cpuset: str = Field(default="", max_length=4096)
    cpu_shares: int = Field(default=0, ge=0)
    cpu_quota: int = Field(default=0, ge=-1)
    memory: int = Field(default=0, ge=0)
    suppressed: bool = False


class NodeInventory(Frozen):
    """Everything one node's engine runs (`eru.node.<node>.inventory`, at the agent's start and every
    `ERU_INVENTORY_SECONDS`).

    `taken_at` is when the agent began listing the engine (its wall clock); `busy` are the containers a command was
    working on at any time between that listing and publishing (their listing may be out of date); `removed` are
    containers recent commands removed, with the command's reason (the result event may still be on its way);
    `agent` names this run of the agent (a new value after each restart)."""

    node: Name
    agent: str = Field(min_length=1, max_length=128)
    taken_at: float = Field(ge=0)
    interval_seconds: float = Field(default=30.0, gt=0)
    containers: list[InventoryEntry] = Field(default_factory=list, max_length=MAX_INVENTORY_CONTAINERS)
    busy: list[str] = Field(default_factory=list, max_length=MAX_INVENTORY_CONTAINERS)
    removed: dict[str, str] = Field(default_factory=dict)


INVENTORIES_MAX = 1000  # nodes in one `NodeInventories` (a process's flush of more nodes sends several)


class NodeInventories(Frozen):
    """The inventories of nodes of one sim process's command group in one message (`eru.inventories.<group>`,
    docs/node-agent.md "Idle cost"): what its nodes took since the process's last flush, each exactly what the node
    would have sent alone; each node is `<group>` or `<group>-<number>`."""

    group: Name
    inventories: list[NodeInventory] = Field(min_length=1, max_length=INVENTORIES_MAX)


class ReconcileRequest(Frozen):
    """`eru reconcile`: compare the ledger with the nodes' latest inventories; `dry_run` changes nothing."""

    node: Name | None = None
    pod: Name | None = None
    dry_run: bool = True
