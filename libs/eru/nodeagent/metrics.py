"""Container usage from the engine's cumulative counters (docs/node-agent.md metrics): pure functions over stats
documents.

The engine reports cumulative CPU time and throttling; usage over an interval is the difference of two readings.
CPU cores used = Δ container CPU time / Δ host CPU time × online CPUs (Docker's own formula), throttling is the
number of throttled CFS periods and the throttled time within the interval. Memory used is the cgroup usage minus
the inactive page cache (what `docker stats` shows), because the kernel reclaims that cache before it OOM-kills.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CpuCounters:
    """Cumulative CPU counters of one container at one reading."""

    usage_ns: int
    system_ns: int
    online_cpus: int
    throttled_periods: int
    throttled_ns: int


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def cpu_counters(stats: Mapping[str, Any]) -> CpuCounters | None:
    """The CPU counters of an engine stats document; None when it has none (a container that is not running)."""
    cpu = stats.get("cpu_stats") or {}
    usage = (cpu.get("cpu_usage") or {}).get("total_usage")
    system = cpu.get("system_cpu_usage")
    if usage is None or system is None:
        return None
    throttling = cpu.get("throttling_data") or {}
    online = _int(cpu.get("online_cpus")) or len((cpu.get("cpu_usage") or {}).get("percpu_usage") or []) or 1
    return CpuCounters(
        usage_ns=_int(usage),
        system_ns=_int(system),
        online_cpus=online,
        throttled_periods=_int(throttling.get("throttled_periods")),
        throttled_ns=_int(throttling.get("throttled_time")),
    )


def cpu_cores_between(before: CpuCounters, after: CpuCounters) -> float:
    """Cores the container used between two readings; 0 when the host clock did not advance or counters reset."""
    system = after.system_ns - before.system_ns
    usage = after.usage_ns - before.usage_ns
    if system <= 0 or usage < 0:
        return 0.0
    return usage / system * after.online_cpus


def throttling_between(before: CpuCounters, after: CpuCounters) -> tuple[int, float]:
    """(throttled CFS periods, throttled seconds) between two readings; zeros when the counters went backwards."""
    periods = after.throttled_periods - before.throttled_periods
    nanoseconds = after.throttled_ns - before.throttled_ns
    if periods < 0 or nanoseconds < 0:
        return 0, 0.0
    return periods, nanoseconds / 1e9


def memory_in_use(stats: Mapping[str, Any]) -> int:
    """Bytes used by a container: usage minus inactive file cache (cgroup v1 `total_inactive_file`, v2
    `inactive_file`)."""
    memory = stats.get("memory_stats") or {}
    usage = _int(memory.get("usage"))
    details = memory.get("stats") or {}
    inactive = details.get("total_inactive_file", details.get("inactive_file", 0))
    return max(0, usage - _int(inactive))


# An empty node's sample that says nothing new is sent at least this often (docs/node-agent.md "Idle cost"), and
# its inventory (the engine runs nothing, no command touched it, nothing removed lately) at least this often.
QUIET_SAMPLE_FLOOR_SECONDS = 60.0
QUIET_INVENTORY_FLOOR_SECONDS = 300.0
INVENTORY_SETTLE_SECONDS = 30.0
"""For this long after an agent's first inventory (and at least two periods), every periodic one goes out, quiet or
not: a restarted agent's engine may run nothing while the ledger still holds its previous run's containers, and the
reconciler marks them lost only from an inventory taken past its grace (`eru.reconcile.ReconcilePolicy.grace_seconds`,
10 s) after their last change (docs/node-agent.md "Idle cost")."""


def inventory_settled(first_sent_at: float | None, now: float, interval_seconds: float) -> bool:
    """Whether an agent whose first inventory went out at `first_sent_at` is past its settling time (the longer of
    `INVENTORY_SETTLE_SECONDS` and two periods), so a quiet periodic inventory may wait for its floor."""
    if first_sent_at is None:
        return False
    return now - first_sent_at > max(INVENTORY_SETTLE_SECONDS, 2 * interval_seconds)


# Each node's floor is the base stretched by up to half of it (`quiet_floor`): nodes registered together would
# otherwise send their floor samples together, every 60 s a burst of all of them within one interval.
QUIET_FLOOR_SPREAD = 0.5


def quiet_floor(base_seconds: float, fraction: float) -> float:
    """A node's floor: `base_seconds` stretched by `fraction` (in [0, 1), the node's own, e.g. from its name) of
    `QUIET_FLOOR_SPREAD`; nodes of different fractions drift apart instead of sending together."""
    return base_seconds * (1 + QUIET_FLOOR_SPREAD * min(max(fraction, 0.0), 1.0))


def inventory_stale_after(interval_seconds: float) -> float:
    """Seconds after which a node's newest inventory is old enough to warn about (is its agent up?): three periods,
    or a quiet node's floor and a period when that is longer."""
    return max(3 * interval_seconds, quiet_floor(QUIET_INVENTORY_FLOOR_SECONDS, 1.0) + interval_seconds)


# The news of a sample that lists containers (or of an inventory with something listed, busy or removed): such a one
# always goes out, and its news is only ever compared with a later empty node's, which it can never equal, so the
# repr of every container it lists (per loaded node and report) is not worth computing.
LISTED: tuple[Any, ...] = (("containers", "listed"),)


def sample_news(sample: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a sample (or an inventory) in its wire form says apart from its time: two with the same news are the
    same."""
    return tuple((key, repr(value)) for key, value in sorted(sample.items()) if key not in ("time", "taken_at"))


def worth_sending(
    news: tuple[Any, ...],
    has_containers: bool,
    last: tuple[tuple[Any, ...], float] | None,
    now: float,
    floor_seconds: float = QUIET_SAMPLE_FLOOR_SECONDS,
) -> bool:
    """Whether a sample (or an inventory, with its own floor) goes out: always while the node runs containers
    (eviction decides over their samples, the reconciler over their listing), and for an empty node when it differs
    from the last one sent (`last`: its news and time) or `floor_seconds` have passed since (the eviction service
    still hears of the node, its condition is refreshed; the reconciler's newest inventory stays recent)."""
    if has_containers or last is None:
        return True
    last_news, sent_at = last
    return news != last_news or now - sent_at >= floor_seconds
