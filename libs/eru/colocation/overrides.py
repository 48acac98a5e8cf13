"""Watermarks as live configuration (docs/colocation.md "Watermarks set live"): per-node and per-pod overrides that
an operator sets with `eru node set NODE --watermark cpu_evict=70` / `eru pod set POD --watermark …`.

Pure: parsing the CLI's `key=value` / `key-` items, applying a change to a stored override, and the effective
configuration of a node. Precedence: node override > pod override > the eviction service's environment
(`ERU_EVICTION__WATERMARKS` < `__PODS__<pod>` < `__NODES__<node>`) > the built-in defaults. Only percentages are
live (`LIVE_FIELDS`): they change no window or horizon, so a running tracker takes them at its next sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eru.colocation.config import PERCENT_FIELDS, ColocationConfig, resolve_config
from eru.errors import InvalidInput
from eru.units import parse_percent

LIVE_FIELDS = PERCENT_FIELDS
SCOPES = ("node", "pod")


def parse_watermark_items(items: Iterable[str], option: str = "--watermark") -> tuple[dict[str, int], list[str]]:
    """`["cpu_suppress=50", "cpu_evict-"]` → (`{"cpu_suppress": 50}`, `["cpu_evict"]`); `InvalidInput` naming
    `<option> <item>` for an item that is neither, an unknown key, a value that is not an integer percentage
    0..100, or a key both set and cleared."""
    values: dict[str, int] = {}
    clear: list[str] = []
    for item in items:
        text = item.strip()
        if "=" in text:
            key, _, raw = text.partition("=")
            key, raw = key.strip(), raw.strip().removesuffix("%")
            field = f"{option} {key}"
            check_key(key, field)
            if not raw.lstrip("-").isdigit():
                raise InvalidInput(field, f"expected an integer percentage 0..100, got {raw!r}")
            values[key] = parse_percent(int(raw), field)
        elif text.endswith("-") and len(text) > 1:
            key = text[:-1].strip()
            check_key(key, f"{option} {key}")
            clear.append(key)
        else:
            raise InvalidInput(option, f"expected key=percent or key- (to clear), got {item!r}")
    both = sorted(set(values) & set(clear))
    if both:
        raise InvalidInput(f"{option} {both[0]}", "both set and cleared in one command")
    return values, clear


def check_key(key: str, field: str) -> None:
    """`InvalidInput` naming `field` unless `key` is a live watermark setting."""
    if key not in LIVE_FIELDS:
        raise InvalidInput(field, f"unknown watermark {key!r} (known: {', '.join(sorted(LIVE_FIELDS))})")


def check_override(settings: Mapping[str, Any], field: str) -> dict[str, int]:
    """A stored or received override: known keys, integer percentages 0..100; `InvalidInput` naming
    `<field>.<key>`."""
    if not isinstance(settings, Mapping):
        raise InvalidInput(field, f"expected an object of watermarks, got {type(settings).__name__}")
    checked: dict[str, int] = {}
    for key, value in settings.items():
        check_key(str(key), f"{field}.{key}")
        checked[str(key)] = parse_percent(value, f"{field}.{key}")
    return checked


def apply_change(
    current: Mapping[str, int], values: Mapping[str, int], clear: Sequence[str], clear_all: bool = False
) -> dict[str, int]:
    """The override after a change: `clear_all` drops everything first, then `clear` keys go, then `values` set."""
    result = {} if clear_all else dict(current)
    for key in clear:
        result.pop(key, None)
    result.update(values)
    return dict(sorted(result.items()))


def effective_config(
    environment: Mapping[str, Any],
    node: str,
    pod: str | None,
    pod_override: Mapping[str, Any] | None,
    node_override: Mapping[str, Any] | None,
) -> ColocationConfig:
    """A node's configuration: defaults < `environment["watermarks"]` < `environment["pods"][pod]` <
    `environment["nodes"][node]` < the pod's override < the node's override; validated as a whole, an
    `InvalidInput` naming the field under the layer that set it (`node.n1.cpu_suppress`, `pod.p1.cpu_evict`)."""
    pods: Mapping[str, Any] = environment.get("pods") or {}
    nodes: Mapping[str, Any] = environment.get("nodes") or {}
    return resolve_config(
        ("eviction.watermarks", environment.get("watermarks")),
        (f"eviction.pods.{pod}", pods.get(pod) if pod else None),
        (f"eviction.nodes.{node}", nodes.get(node)),
        (f"pod.{pod}", pod_override or None),
        (f"node.{node}", node_override or None),
    )


def describe(settings: Mapping[str, Any]) -> str:
    """`cpu_evict=70 cpu_suppress=50`, or `-` for no override."""
    return " ".join(f"{key}={value}" for key, value in sorted(settings.items())) or "-"


def environment_watermarks(environment: Mapping[str, Any]) -> dict[str, Any]:
    """What the eviction service's environment sets, as `eru status` shows it (docs/colocation.md): `defaults`, every
    live field as `eviction.watermarks` resolves it over the built-in defaults, and the `pods` / `nodes` layers
    (`ERU_EVICTION__PODS__<pod>`, `__NODES__<node>`), their live fields only, for those that set any.

    Example: `{"watermarks": {"cpu_evict": 80}}` → `{"defaults": {"cpu_forbid": 65, …, "cpu_evict": 80, …},
    "pods": {}, "nodes": {}}`."""
    config = resolve_config(("eviction.watermarks", environment.get("watermarks")))
    layers: dict[str, Any] = {"defaults": {name: getattr(config, name) for name in LIVE_FIELDS}}
    for scope in ("pods", "nodes"):
        given = environment.get(scope) or {}
        layers[scope] = {
            str(name): {key: value for key, value in values.items() if key in LIVE_FIELDS}
            for name, values in sorted(given.items())
            if isinstance(values, Mapping) and any(key in LIVE_FIELDS for key in values)
        }
    return layers
