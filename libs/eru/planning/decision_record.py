"""Compact decision records (docs/replay.md "A batch's snapshot, stored once"): the nodes of a batch's snapshot are
stored once, and each decision of the batch refers to them by name.

At 1,000 nodes the full record (`eru.planning.decide.record`) of one request is ~440 KB — every node the request
may use with its 32 cores — and every request of a batch repeated it. A batch's requests are decided one after the
other against the snapshot the previous ones left, so a node a request did not charge is the very node object of the
batch's first snapshot. `RecordBook.record` writes such a node as its name (its live count in `snapshot_counts`) and
every other node in full; `RecordBook.snapshot` is the text of the named nodes, stored once per batch (table
`decision_snapshots`, same transaction as the decisions). `expand(problem, nodes)` gives back exactly the full
record, so `eru replay`, `eru explain` and `eru plan` see what they always saw.

A node an earlier request of the batch charged differs from the snapshot's only in what it uses: it is written as
that difference (`{"from_snapshot": name, "used": {...}, "count": n}`), not in full. With 16 nodes of 64 cores a
single's record was ~20 KB once every node had been charged (PostgreSQL compressed each one: most of a batch's
insert), and is ~2 KB so.

Compact form: the full problem's keys, but `nodes` holds, in the order the planner saw them, either a node's name
(the node as `snapshot` holds it), a change of a snapshot node (`from_snapshot`: its name, then the top-level fields
that differ, and its count) or the node in full (with its count); plus `"snapshot": <id>` and
`"snapshot_counts": {name: count}` (only named nodes with a count above 0).

A request that may use every node of the snapshot, in the snapshot's (name) order — every request without a node
filter, eviction memory or watermark that leaves a node out — does not name them: `"snapshot_all": true`, and
`nodes` holds only its entries that are not plain names (the nodes charged earlier in the batch). At 5,000 nodes
that is ~60 KB of names less per record and no per-node work (docs/planning.md "Per-batch cost").

A batch's snapshot row need not hold every node either: with a `SnapshotChain` (one per pod and allocator process)
it holds only the nodes that differ from the snapshot row this process stored last for the pod, and
`"@base": <that row's id>` (`BASE_KEY`; node names never start with `@`). A full row is written again when there is
no stored row, the chain's full row is older than `MAX_BASE_AGE` seconds (retention keeps it: docs/replay.md), the
chain holds `MAX_DEPTH` changes already, or more than half of the nodes differ. A reader follows `@base` to the full
row and lays the changes over it in order (`merged`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from operator import lt
from typing import Any

from eru.errors import InvalidInput
from eru.planning.decide import NodeCache, Staged, batch_fields, node_text, problem_head
from eru.planning.resources import NodeResources

SNAPSHOT_KEY = "snapshot"
ALL_KEY = "snapshot_all"
COUNTS_KEY = "snapshot_counts"
FROM_KEY = "from_snapshot"
BASE_KEY = "@base"
MAX_BASE_AGE = 30.0
"""Seconds a full snapshot row serves as the root of later changes: under the narrowest retention partition (a
minute), which `eru.store.retention.LONGER` keeps snapshots longer than their decisions."""
MAX_DEPTH = 24
"""Changes laid over one full row at most (what a reader fetches: this many rows and the full one). A full row of
5,000 nodes is ~2.5 MB to write, a change of ~400 charged nodes ~0.2 MB: at 8 the full rows were half of the bytes a
batch wrote (docs/replay.md)."""
MAX_CHAIN = 64
"""The longest chain a reader follows (a writer makes at most `MAX_DEPTH` + 1): a loop of rows is an error."""
MAX_CHANGED = 0.5
"""The share of the nodes that may differ from the last row before a full row is written again."""


@dataclass(slots=True)
class SnapshotChain:
    """The snapshot rows this process stored last for one pod: the last one's id, the node objects the chain holds
    (the full row with every change over it), when its full row was written (the caller's monotonic clock), how
    many changes follow it and the `share_base` its texts used. Updated only once a row is committed
    (`RecordBook.stored`), so a later row never refers to one that is not there."""

    base_id: str | None = None
    nodes: dict[str, NodeResources] = field(default_factory=dict)
    at: float = 0.0
    depth: int = 0
    share_base: Any = None


class RecordBook:
    """The records of one batch's decisions; `base` is the batch's first snapshot (its node objects)."""

    def __init__(
        self,
        snapshot_id: str,
        base: Iterable[NodeResources],
        texts: NodeCache | None = None,
        chain: SnapshotChain | None = None,
        now: float = 0.0,
    ) -> None:
        """`texts`: node texts to reuse while a node object is the same, e.g. a process's across its batches (a
        batch of one request writes every node of its snapshot: at a trickle, that is every batch). `chain`: the
        pod's last stored full snapshot, `now` on its clock: the snapshot row then holds only what differs."""
        self.snapshot_id = snapshot_id
        self._chain = chain
        self._now = now
        # what `stored` makes of the chain: (the row's nodes, whether it is full, its texts' share_base)
        self._row: tuple[dict[str, NodeResources], bool, Any] | None = None
        self._base = {node.name: node for node in base}
        self._texts: NodeCache = texts if texts is not None else {}  # the snapshot's nodes
        self._full: NodeCache = {}  # nodes written in full (their capacity changed within the batch)
        self._named: dict[str, str] = {}  # base nodes some record named → their text without the closing brace
        self._deltas: dict[str, tuple[NodeResources, str | None]] = {}  # name → (charged node, its change's text)
        self._nodes = tuple(self._base.values())  # the snapshot's nodes in its order
        self._sorted = all(map(lt, self._base, islice(self._base, 1, None)))  # names ascending (in C: ~0.2 ms at 5,000)
        self._all = False  # a record named every node (`snapshot_all`): the snapshot holds them all
        self._staged: Staged | None = None  # that record's (its config, for the nodes' texts)
        self._any_staged: Staged | None = None  # any record's (the config its texts used)
        self._names: dict[str, str] = {}  # name → its JSON text

    def record(self, staged: Staged) -> str:
        """The decision's input in compact form (JSON text): unchanged nodes by name, charged ones as their change
        (`from_snapshot`), others in full; a request that may use every node of the snapshot, in its order, names
        none (`snapshot_all`: only its changed nodes are written, docs/planning.md "Per-batch cost")."""
        self._any_staged = staged
        considered = staged.considered
        if self._sorted and len(considered) == len(self._nodes):
            # the snapshot's nodes in its order: the same objects but the charged ones (one identity test per node)
            pairs = [(mine, was) for mine, was in zip(considered, self._nodes, strict=True) if mine is not was]
            if all(mine.name == was.name for mine, was in pairs):
                return self._record_all(staged, [mine for mine, _ in pairs])
        parts: list[str] = []
        counts: dict[str, int] = {}
        named = False
        for node in considered:
            count = staged.counts.get(node.name, 0)
            if self._base.get(node.name) is node:
                if node.name not in self._named:
                    self._named[node.name] = node_text(node, staged, self._texts)
                named = True
                parts.append(self._name_text(node.name))
                if count:
                    counts[node.name] = count
            else:
                parts.append(self._entry(node, staged, count))
                named = named or self._deltas[node.name][1] is not None
        head = problem_head(staged)
        if named:
            head[SNAPSHOT_KEY] = self.snapshot_id
            head[COUNTS_KEY] = counts
        return json.dumps(head)[:-1] + ', "nodes": [' + ", ".join(parts) + "]}"

    def _record_all(self, staged: Staged, changed: list[NodeResources]) -> str:
        """`record` of a request that may use every node of the snapshot, in the snapshot's order: `nodes` holds only
        the nodes that are not the snapshot's (charged earlier in the batch), `snapshot_all` says the others are."""
        self._all = True
        self._staged = staged
        parts = [self._entry(node, staged, staged.counts.get(node.name, 0)) for node in changed]
        skip = {node.name for node in changed}
        head = problem_head(staged)
        head[SNAPSHOT_KEY] = self.snapshot_id
        head[COUNTS_KEY] = {name: n for name, n in staged.counts.items() if n and name not in skip}
        head[ALL_KEY] = True
        return json.dumps(head)[:-1] + ', "nodes": [' + ", ".join(parts) + "]}"

    def _entry(self, node: NodeResources, staged: Staged, count: int) -> str:
        """A node that is not the snapshot's: its change, or the node in full (with its count)."""
        delta = self._delta(node, staged)
        if delta is not None:
            return f'{delta}, "count": {count}}}'
        return f'{node_text(node, staged, self._full)}, "count": {count}}}'

    def _name_text(self, name: str) -> str:
        text = self._names.get(name)
        if text is None:
            text = self._names[name] = json.dumps(name)
        return text

    def _delta(self, node: NodeResources, staged: Staged) -> str | None:
        """`node` as its change from the batch's snapshot node of that name (JSON text without the closing brace),
        reused while the node object is the same; None when there is no such node or its capacity differs."""
        cached = self._deltas.get(node.name)
        if cached is not None and cached[0] is node:
            return cached[1]
        base = self._base.get(node.name)
        text: str | None = None
        if base is not None and _same_capacity(base, node):
            share_base = staged.snapshot.config.share_base
            was, now = batch_fields(base, share_base), batch_fields(node, share_base)
            if was.keys() == now.keys():
                self._named[node.name] = node_text(base, staged, self._texts)
                used = {
                    "cpu_map": dict(node.used_cpu_map),
                    "memory": node.used_memory,
                    "numa_memory": dict(node.used_numa_memory),
                }
                changed: dict[str, Any] = {FROM_KEY: node.name, "used": used}
                if was != now:
                    changed.update(now)
                text = json.dumps(changed)[:-1]
        self._deltas[node.name] = (node, text)
        return text

    def snapshot(self) -> str | None:
        """The named nodes as one JSON object (name → node in `eru plan` form, without count); None when no record
        named any (nothing to store). With a usable chain base: only the nodes that differ from it, and `@base`."""
        named = set(self._named)
        if self._staged is not None:
            named.update(self._base)
        if not named:
            return None
        share_base = self._share_base()
        chain = self._chain
        base = self._base
        if chain is not None and self._chained(chain, named, share_base):
            kept = chain.nodes
            differ = sorted(name for name in named if kept.get(name) is not base[name])
            if len(differ) <= MAX_CHANGED * len(named):
                self._row = ({name: base[name] for name in differ}, False, share_base)
                head = f"{{{json.dumps(BASE_KEY)}: {json.dumps(chain.base_id)}"
                return head + "".join(f", {self._name_text(name)}: {self._text(name)}}}" for name in differ) + "}"
        self._row = ({name: base[name] for name in named}, True, share_base)
        return "{" + ", ".join(f"{self._name_text(name)}: {self._text(name)}}}" for name in sorted(named)) + "}"

    def stored(self) -> None:
        """The batch's snapshot row is committed: the chain's last row now (a full one starts a new chain, now)."""
        chain, row = self._chain, self._row
        if chain is None or row is None:
            return
        nodes, full, share_base = row
        if full:
            chain.nodes, chain.at, chain.depth, chain.share_base = nodes, self._now, 0, share_base
        else:
            chain.nodes = {**chain.nodes, **nodes}
            chain.depth += 1
        chain.base_id = self.snapshot_id
        self._row = None

    def _chained(self, chain: SnapshotChain, named: set[str], share_base: Any) -> bool:
        """Whether the chain's last row can serve as the base: stored, its full row fresh, not too deep, the same
        texts' config, and (for a `snapshot_all` record) no node of the chain missing now (the merged row must be
        exactly the snapshot)."""
        if chain.base_id is None or chain.depth >= MAX_DEPTH or chain.share_base != share_base:
            return False
        if self._now - chain.at > MAX_BASE_AGE:
            return False
        return not self._all or chain.nodes.keys() <= named

    def _share_base(self) -> Any:
        staged = self._staged or self._any_staged
        return staged.snapshot.config.share_base if staged is not None else None

    def _text(self, name: str) -> str:
        text = self._named.get(name)
        if text is None:
            assert self._staged is not None  # only a `snapshot_all` book names nodes no record wrote
            text = self._named[name] = node_text(self._base[name], self._staged, self._texts)
        return text


def base_of(nodes: Mapping[str, Any]) -> str | None:
    """The id of the full snapshot a stored snapshot row is a change of, or None for a full one."""
    ref = nodes.get(BASE_KEY)
    if ref is None:
        return None
    if not isinstance(ref, str) or not ref:
        raise InvalidInput(f"snapshot.{BASE_KEY}", f"expected a snapshot id, got {ref!r}")
    return ref


def merged(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A snapshot whole from its chain of stored rows, the referred one first and each next one its `@base`: the
    full row's nodes with each change laid over them in order. `InvalidInput` naming `input.snapshot` when the
    chain does not end in a full row (a row not recorded) or is longer than any writer makes it."""
    if not rows or len(rows) > MAX_CHAIN:
        raise InvalidInput("input.snapshot", f"expected a chain of 1 to {MAX_CHAIN} snapshot rows, got {len(rows)}")
    root = rows[-1]
    ref = base_of(root)
    if ref is not None:
        raise InvalidInput("input.snapshot", f"base snapshot {ref!r} is not recorded")
    whole = dict(root)
    for row in reversed(rows[:-1]):
        whole.update(row)
    whole.pop(BASE_KEY, None)
    return whole


def snapshot_of(problem: Mapping[str, Any]) -> str | None:
    """The id of the snapshot a recorded problem refers to, or None for a full record."""
    ref = problem.get(SNAPSHOT_KEY)
    if ref is None:
        return None
    if not isinstance(ref, str) or not ref:
        raise InvalidInput("input.snapshot", f"expected a snapshot id, got {ref!r}")
    return ref


def expand(problem: Mapping[str, Any], nodes: Mapping[str, Any] | None) -> dict[str, Any]:
    """The full `eru plan` problem of a recorded one (a full record is returned as it is); `nodes` is the referred
    snapshot (name → node). `InvalidInput` naming the field when a named node or the snapshot is missing."""
    if snapshot_of(problem) is None:
        return dict(problem)
    if nodes is None:
        raise InvalidInput("input.snapshot", f"snapshot {problem[SNAPSHOT_KEY]!r} is not recorded")
    counts = problem.get(COUNTS_KEY) or {}
    if not isinstance(counts, Mapping):
        raise InvalidInput(f"input.{COUNTS_KEY}", "expected an object of node name → count")
    entries = problem.get("nodes")
    if not isinstance(entries, list):
        raise InvalidInput("input.nodes", "expected a list")
    if problem.get(ALL_KEY) is True:
        entries = _all_entries(entries, nodes)
    full: list[Any] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, Mapping) and FROM_KEY in entry:
            full.append(_changed(entry, nodes, index, problem[SNAPSHOT_KEY]))
            continue
        if not isinstance(entry, str):
            full.append(entry)
            continue
        node = nodes.get(entry)
        if not isinstance(node, Mapping):
            raise InvalidInput(f"input.nodes[{index}]", f"node {entry!r} is not in snapshot {problem[SNAPSHOT_KEY]!r}")
        full.append({**node, "count": counts.get(entry, 0)})
    expanded = {key: value for key, value in problem.items() if key not in (SNAPSHOT_KEY, COUNTS_KEY, ALL_KEY)}
    expanded["nodes"] = full
    return expanded


def _all_entries(entries: list[Any], nodes: Mapping[str, Any]) -> list[Any]:
    """A `snapshot_all` record's nodes as a named record's: every node of the snapshot in name order, as its name or
    as the record's own entry for it (a change, or the node in full)."""
    own: dict[str, Any] = {}
    for index, entry in enumerate(entries):
        name = entry.get(FROM_KEY, entry.get("name")) if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or name not in nodes or name in own:
            raise InvalidInput(f"input.nodes[{index}]", "expected a change of a distinct node of the snapshot")
        own[name] = entry
    return [own.get(name, name) for name in sorted(nodes)]


def _same_capacity(base: NodeResources, node: NodeResources) -> bool:
    """Whether the two differ at most in what they use (charging never changes capacity)."""
    return all(
        mine is theirs or mine == theirs
        for mine, theirs in (
            (base.cpu_map, node.cpu_map),
            (base.memory, node.memory),
            (base.numa, node.numa),
            (base.numa_memory, node.numa_memory),
        )
    )


def _changed(entry: Mapping[str, Any], nodes: Mapping[str, Any], index: int, snapshot: Any) -> dict[str, Any]:
    """A `from_snapshot` entry as the full node: the snapshot's node with the entry's fields over it."""
    name = entry[FROM_KEY]
    node = nodes.get(name) if isinstance(name, str) else None
    if not isinstance(node, Mapping):
        raise InvalidInput(f"input.nodes[{index}].{FROM_KEY}", f"node {name!r} is not in snapshot {snapshot!r}")
    return {**node, **{key: value for key, value in entry.items() if key != FROM_KEY}, "name": name}


__all__ = [
    "ALL_KEY",
    "BASE_KEY",
    "COUNTS_KEY",
    "FROM_KEY",
    "MAX_BASE_AGE",
    "MAX_CHAIN",
    "MAX_DEPTH",
    "SNAPSHOT_KEY",
    "RecordBook",
    "SnapshotChain",
    "base_of",
    "expand",
    "merged",
    "snapshot_of",
]
