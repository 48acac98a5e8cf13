"""Message bodies: pydantic v2 models as msgpack (JSON accepted with `Content-Type: application/json`).

A model is dumped in pydantic's JSON mode before packing, so the msgpack and JSON forms of a message carry the same
values (decimals and datetimes as strings, dict keys as strings) and both validate back to the same model in pydantic's
default (lax) mode. Anything that does not decode or validate raises `InvalidInput` naming the field and the reason.

Decoding is bounded (docs/bus.md "Bounded decoding"): a body above `max_body_bytes`, nesting deeper than `max_depth`
or holding a list/map longer than `max_collection_length` is refused before it is validated, for JSON and msgpack
alike, so no message can exhaust the stack (Python's JSON decoder recurses) or memory of a service.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any, NoReturn, TypeVar

import msgpack
from pydantic import BaseModel, ValidationError

from eru.bounded import BODY_FIELD, DecodeLimits, check_json_text, check_shape, clip, find_unencodable
from eru.errors import InvalidInput

MSGPACK = "application/msgpack"
JSON = "application/json"
_MSGPACK_ALIASES = frozenset({MSGPACK, "application/x-msgpack", "application/vnd.msgpack"})

ModelT = TypeVar("ModelT", bound=BaseModel)


_limits = DecodeLimits()


def set_decode_limits(limits: DecodeLimits) -> None:
    """Use `limits` for every later decode of this process (the service runner sets them from the settings)."""
    global _limits
    for name in ("max_body_bytes", "max_depth", "max_collection_length"):
        if getattr(limits, name) < 1:
            raise InvalidInput(f"bus.{name}", f"must be at least 1, got {getattr(limits, name)}")
    _limits = limits


def decode_limits() -> DecodeLimits:
    """The limits decoding uses now."""
    return _limits


def media_type(content_type: str | None) -> str:
    """The bare media type of a `Content-Type` value (`application/json; charset=utf-8` → `application/json`).

    Missing or empty means msgpack, the bus's default. Anything else than msgpack or JSON raises `InvalidInput`.
    """
    if content_type is None or not content_type.strip():
        return MSGPACK
    bare = content_type.split(";", 1)[0].strip().lower()
    if bare in _MSGPACK_ALIASES:
        return MSGPACK
    if bare == JSON:
        return JSON
    raise InvalidInput("Content-Type", f"unsupported {content_type!r}: use {MSGPACK} (default) or {JSON}")


def to_wire(model: BaseModel) -> Any:
    """The plain value a model travels as (pydantic JSON mode: str, int, float, bool, None, list, dict), or its
    `wire_form()` when its class has one (a compact form that validates back to an equal model, e.g. a node's
    command batch: eru.domain.compact)."""
    compact = getattr(type(model), "wire_form", None)
    if compact is not None:
        return compact(model)
    return model.model_dump(mode="json")


def encode(model: BaseModel, content_type: str | None = None) -> bytes:
    """The body of `model`: msgpack by default, JSON when `content_type` is `application/json`."""
    return encode_value(to_wire(model), content_type)


def encode_value(value: Any, content_type: str | None = None) -> bytes:
    """A plain value (already JSON-compatible) as a body of the given content type; a string that cannot be written
    as UTF-8 (a lone surrogate) is `InvalidInput` naming its path."""
    try:
        if media_type(content_type) == JSON:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        packed: bytes = msgpack.packb(value, use_bin_type=True)
    except UnicodeEncodeError:
        found = find_unencodable(value)
        raise InvalidInput(*(found or (BODY_FIELD, "not UTF-8 text"))) from None
    return packed


def check_payload(body: bytes, value: Any, max_payload: int) -> None:
    """Refuse a body the server would refuse (above its `max_payload`): `InvalidInput` naming the largest string
    field of `value`, the likely cause, instead of nats-py's bare MaxPayloadError (docs/bus.md "Bounded decoding")."""
    if len(body) <= max_payload:
        return
    path, size = largest_string(value)
    reason = (
        f"{size:,} characters make the message {len(body):,} bytes, above the bus's max_payload of "
        f"{max_payload:,} bytes"
    )
    raise InvalidInput(path, reason, size=len(body), max_payload=max_payload)


def largest_string(value: Any) -> tuple[str, int]:
    """The path and length of the longest string (map key or value) in a plain value (`body`, 0 when none)."""
    best: tuple[str, int] = (BODY_FIELD, 0)
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str | bytes):
            if len(item) > best[1]:
                best = (path or BODY_FIELD, len(item))
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and len(key) > best[1]:
                    best = (path or BODY_FIELD, len(key))
                stack.append((child, f"{path}.{key}" if path else str(key)))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return best


def decode_value(data: bytes, content_type: str | None = None, limits: DecodeLimits | None = None) -> Any:
    """The plain value in a body; `InvalidInput` on field `body` when it is not valid msgpack / JSON or exceeds a
    limit (`decode_limits()` unless given)."""
    limits = limits or _limits
    kind = media_type(content_type)
    if len(data) > limits.max_body_bytes:
        raise InvalidInput(
            BODY_FIELD, f"{len(data)} bytes, above the limit of {limits.max_body_bytes} (bus.max_body_bytes)"
        )
    if kind == JSON:
        try:
            text = data.decode("utf-8-sig")  # JSON on the wire is UTF-8 (RFC 8259); json.loads(bytes) guesses others
        except UnicodeDecodeError as error:
            _refuse_undecodable(data, error, JSON)
        try:
            value = json.loads(text)
            check_json_text(data, value)  # a `\ud800` escape decodes to a string no one can write: name its field
        except ValueError as error:
            raise InvalidInput(BODY_FIELD, f"not valid JSON: {error}") from None
        except RecursionError:
            # the C decoder stops at the interpreter's recursion limit (~1,000 levels, far above max_depth ≤ 512,
            # which check_shape enforces below): cheaper than scanning every body's brackets beforehand
            raise InvalidInput(
                BODY_FIELD, f"nested deeper than {limits.max_depth} levels (limit bus.max_depth)"
            ) from None
    else:
        if not data:
            raise InvalidInput(BODY_FIELD, "empty: expected a msgpack map")
        try:
            value = msgpack.unpackb(
                data,
                raw=False,
                strict_map_key=False,
                max_array_len=limits.max_collection_length,
                max_map_len=limits.max_collection_length,
            )
        except msgpack.ExtraData:
            raise InvalidInput(BODY_FIELD, "not valid msgpack: extra bytes after the first value") from None
        except msgpack.StackError:
            raise InvalidInput(
                BODY_FIELD, f"nested deeper than {limits.max_depth} levels (limit bus.max_depth)"
            ) from None
        except UnicodeDecodeError as error:
            _refuse_undecodable(data, error, MSGPACK)
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            detail = str(error) or type(error).__name__
            if "exceeds max_" in detail:
                detail += f" (limit bus.max_collection_length {limits.max_collection_length})"
            raise InvalidInput(BODY_FIELD, f"not valid msgpack: {detail}") from None
    if isinstance(value, dict | list):
        check_shape(value, limits)
    return value


def _refuse_undecodable(data: bytes, error: UnicodeDecodeError, kind: str) -> NoReturn:
    """A body with bytes that are not UTF-8: `InvalidInput` naming the string that holds them when the body is
    otherwise well formed (read again keeping the bytes as surrogates), else on `body` (the slow path, for refused
    bodies only)."""
    byte = error.object[error.start] if error.start < len(error.object) else 0
    reason = f"not UTF-8 text (byte 0x{byte:02x} at position {error.start})"
    value: Any = None
    with contextlib.suppress(Exception):
        if kind == JSON:
            value = json.loads(data.decode("utf-8-sig", "surrogateescape"))
        else:
            value = msgpack.unpackb(
                data, raw=False, strict_map_key=False, unicode_errors="surrogateescape", max_array_len=1 << 20
            )
    found = find_unencodable(value) if value is not None else None
    if found is not None:
        raise InvalidInput(found[0], reason) from None
    if kind == JSON:
        raise InvalidInput(BODY_FIELD, f"not valid JSON: {reason}") from None
    raise InvalidInput(BODY_FIELD, f"not valid msgpack: {reason}") from None


def field_path(location: Sequence[int | str], prefix: str | None = None) -> str:
    """A pydantic error location as a dotted path with list indices in brackets: `workload.command[2]`. A part that
    is a key the sender made up (an unknown field) is clipped (`fuzz-xxxx… (200,000 characters)`): a path goes into
    the reply, the dead letter and every log line of the refusal."""
    path = prefix or ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = clip(str(part))
            path = f"{path}.{name}" if path else name
    return path or BODY_FIELD


def validation_failure(error: ValidationError, prefix: str | None = None) -> InvalidInput:
    """`InvalidInput` naming the first failing field; every failure is in `details["errors"]`."""
    problems = [
        {"field": field_path(item["loc"], prefix), "reason": str(item["msg"]).removeprefix("Value error, ")}
        for item in error.errors(include_url=False)
    ]
    first = problems[0] if problems else {"field": prefix or BODY_FIELD, "reason": str(error)}
    return InvalidInput(first["field"], first["reason"], errors=problems)


def validate(value: Any, model_type: type[ModelT], *, prefix: str | None = None) -> ModelT:
    """`model_type` validated from a plain value, `InvalidInput` naming the field otherwise."""
    try:
        return model_type.model_validate(value)
    except ValidationError as error:
        raise validation_failure(error, prefix) from None


def decode(
    data: bytes, model_type: type[ModelT], content_type: str | None = None, *, prefix: str | None = None
) -> ModelT:
    """The `model_type` in a body (msgpack, or JSON when `content_type` is `application/json`).

    Malformed bytes raise `InvalidInput` on field `body`; a schema violation raises `InvalidInput` on the field's path
    (`workload.resources.cpu_request`, or `request.cpu_request` with `prefix="request"`).
    """
    return validate(decode_value(data, content_type), model_type, prefix=prefix)
