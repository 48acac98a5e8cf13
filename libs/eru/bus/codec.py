"""Message bodies: pydantic v2 models as msgpack (JSON accepted with `Content-Type: application/json`).

A model is dumped in pydantic's JSON mode before packing, so the msgpack and JSON forms of a message carry the same
values (decimals and datetimes as strings, dict keys as strings) and both validate back to the same model in pydantic's
default (lax) mode. Anything that does not decode or validate raises `InvalidInput` naming the field and the reason.

Decoding is bounded (docs/bus.md "Bounded decoding"): a body above `max_body_bytes`, nesting deeper than `max_depth`
or holding a list/map longer than `max_collection_length` is refused before it is validated, for JSON and msgpack
alike, so no message can exhaust the stack (Python's JSON decoder recurses) or memory of a service.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

import msgpack
from pydantic import BaseModel, ValidationError

from eru.bounded import BODY_FIELD, DecodeLimits, check_shape
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
    """A plain value (already JSON-compatible) as a body of the given content type."""
    if media_type(content_type) == JSON:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


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
            where = f"byte 0x{data[error.start]:02x} at position {error.start}"
            raise InvalidInput(BODY_FIELD, f"not valid JSON: not UTF-8 text ({where})") from None
        try:
            value = json.loads(text)
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
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            detail = str(error) or type(error).__name__
            if "exceeds max_" in detail:
                detail += f" (limit bus.max_collection_length {limits.max_collection_length})"
            raise InvalidInput(BODY_FIELD, f"not valid msgpack: {detail}") from None
    if isinstance(value, dict | list):
        check_shape(value, limits)
    return value


def field_path(location: Sequence[int | str], prefix: str | None = None) -> str:
    """A pydantic error location as a dotted path with list indices in brackets: `workload.command[2]`."""
    path = prefix or ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path or BODY_FIELD


def validation_failure(error: ValidationError, prefix: str | None = None) -> InvalidInput:
    """`InvalidInput` naming the first failing field; every failure is in `details["errors"]`."""
    problems = [
        {"field": field_path(item["loc"], prefix), "reason": str(item["msg"])}
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
