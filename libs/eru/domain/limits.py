"""Limits on the strings users give eru (docs/cli.md "Limits"): image references, names, labels, environment,
commands, mounts. Docker's own rules where it has them, documented maxima elsewhere, all in this one module.

Every check raises `ValueError` with a reason that quotes at most the first 40 characters of the value (a 120 KB
image is refused in one short line), so the error names the field it is attached to (`workload.image` on the bus,
`--image` in `eru deploy`) and never one derived from it. Every string must also be writable as UTF-8: a lone
surrogate (a broken `\\ud800` escape, an undecodable byte of an argument) is refused here too.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from eru.bounded import clip, unencodable

# Docker's reference grammar (github.com/distribution/reference, regexp.go and reference.go).
IMAGE_NAME_MAX = 255
"""The image name, registry and path (`registry.local:5000/team/web`): Docker's NameTotalLengthMax."""
IMAGE_TAG_MAX = 128
"""A tag: `[\\w][\\w.-]{0,127}`."""
IMAGE_DIGEST_MAX = 135
"""A digest `algorithm:hex` (hex at least 32 digits): at most `sha512:` and 128 hex digits."""
IMAGE_MAX = IMAGE_NAME_MAX + 1 + IMAGE_TAG_MAX + 1 + IMAGE_DIGEST_MAX
"""A whole reference `name[:tag][@digest]`: 520 characters."""
NAME_MAX = 128
"""A workload, pod or node name: `[A-Za-z0-9][A-Za-z0-9_-]*` (Docker's container names allow `.` too)."""
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"
TENANT_MAX = 257
"""A tenant `team-a` or its group `team-a/web`: two names and a slash."""
LABELS_MAX = 64
FILTER_NODES_MAX = 1000
"""Nodes a deploy's node filter names in `nodes` or in `exclude_nodes` (`--nodes`, `--exclude-nodes`)."""
LABEL_KEY_MAX = 128
LABEL_VALUE_MAX = 1024
ENV_MAX = 256
ENV_NAME_MAX = 256
ENV_ENTRY_MAX = 32 * 1024
"""One `NAME=value` (Linux allows 128 KiB per string, MAX_ARG_STRLEN; a message must stay far below 1 MiB)."""
ENV_TOTAL_MAX = 64 * 1024
ARGS_MAX = 256
"""Arguments of a command (`command`, `health_command`)."""
ARG_MAX = 32 * 1024
ARGS_TOTAL_MAX = 64 * 1024
MOUNTS_MAX = 64
MOUNT_MAX = 4096 * 2 + 4
"""`HOST_PATH:CONTAINER_PATH[:ro]`, each path at most PATH_MAX (4,096)."""
CAPS_MAX = 64
CAP_MAX = 64
SHORT_TEXT_MAX = 256
"""Short free text: a network mode, a removal reason, a request id's neighbours."""
ID_MAX = 256
"""An id eru made and hands back: a container, deploy, decision or event id is a UUID (36 characters); an eviction
decision `<node>-<ms>-<kind>` is at most 153."""
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
MODE_MAX = 64
"""A placement mode's name (`auto`, `each`, … docs/placement-modes.md)."""

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = re.compile(rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?")
_TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_ENV_NAME = re.compile(r"[^=\x00]+")


def text(value: str, what: str = "") -> str:
    """`value` when it can be written as UTF-8 (no lone surrogate), else `ValueError` (naming `what` when given)."""
    reason = unencodable(value)
    if reason is not None:
        raise ValueError(f"{what}: {reason}" if what else reason)
    return value


def _bounded(value: str, maximum: int, what: str = "") -> str:
    text(value, what)
    if len(value) > maximum:
        raise ValueError(f"{what or 'the text'} is {len(value):,} characters, above the limit of {maximum:,}")
    return value


def image_reference(value: str) -> str:
    """A Docker image reference `[registry[:port]/]path[:tag][@algorithm:hex]`, within Docker's limits."""
    text(value)
    if not value:
        raise ValueError("an image reference must not be empty")
    if len(value) > IMAGE_MAX:
        raise ValueError(f"{len(value):,} characters, above the limit of {IMAGE_MAX} (got {clip(value)!r})")
    name, _, digest = value.partition("@")
    if digest and (len(digest) > IMAGE_DIGEST_MAX or not _DIGEST.fullmatch(digest)):
        raise ValueError(f"digest {clip(digest)!r} is not `algorithm:hex` (32 to 128 hex digits)")
    slash = name.rfind("/")
    colon = name.rfind(":")
    name, tag = (name[:colon], name[colon + 1 :]) if colon > slash else (name, None)
    if tag is not None and (len(tag) > IMAGE_TAG_MAX or not _TAG.fullmatch(tag)):
        raise ValueError(
            f"tag {clip(tag)!r} must be 1 to {IMAGE_TAG_MAX} letters, digits, `_`, `.` or `-`, not starting with `.` "
            f"or `-` ({len(tag):,} characters)"
        )
    if len(name) > IMAGE_NAME_MAX:
        raise ValueError(
            f"the image name is {len(name):,} characters, above Docker's limit of {IMAGE_NAME_MAX} (got {clip(name)!r})"
        )
    parts = name.split("/")
    first = parts[0]
    if len(parts) > 1 and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        if not _DOMAIN.fullmatch(first):
            raise ValueError(f"registry {clip(first)!r} is not a host name with an optional :port")
        parts = parts[1:]
    for part in parts:
        if not _PATH_COMPONENT.fullmatch(part):
            raise ValueError(
                f"path component {clip(part)!r} must be lowercase letters and digits, separated by `.`, `_`, `__` "
                "or dashes"
            )
    return value


_ID = re.compile(ID_PATTERN)


def identifier(value: str) -> str:
    """An id eru made (a container, decision or event id): 1 to 256 letters, digits, `_`, `.`, `:` or `-`, starting
    with a letter or digit; anything else names nothing, and is refused before it is looked up."""
    _bounded(value, ID_MAX, "an id")
    if not _ID.match(value):
        raise ValueError(f"{clip(value)!r} is not an id: letters, digits, `_`, `.`, `:` or `-`")
    return value


def mode_name(value: str) -> str:
    """A placement mode's name: at most 64 characters (which modes exist is the planner's to say)."""
    return _bounded(value, MODE_MAX, "a mode name")


def tenant(value: str) -> str:
    """A tenant name as a workload names its owner (`team-a`, or a group `team-a/web`)."""
    return _bounded(value, TENANT_MAX, "the tenant")


def short_text(value: str) -> str:
    """Free text of at most 256 characters."""
    return _bounded(value, SHORT_TEXT_MAX)


def labels(value: dict[str, str]) -> dict[str, str]:
    """At most 64 labels, keys 1 to 128 characters, values at most 1,024."""
    if len(value) > LABELS_MAX:
        raise ValueError(f"{len(value):,} labels, above the limit of {LABELS_MAX}")
    for key, item in value.items():
        if not key:
            raise ValueError("a label key must not be empty")
        _bounded(key, LABEL_KEY_MAX, f"label key {clip(key)!r}")
        _bounded(item, LABEL_VALUE_MAX, f"the value of label {clip(key)!r}")
    return value


def env(value: dict[str, str]) -> dict[str, str]:
    """At most 256 variables; a name without `=` or NUL of at most 256 characters; `NAME=value` at most 32 KiB, all
    of them at most 64 KiB."""
    if len(value) > ENV_MAX:
        raise ValueError(f"{len(value):,} variables, above the limit of {ENV_MAX}")
    total = 0
    for key, item in value.items():
        _bounded(key, ENV_NAME_MAX, f"variable name {clip(key)!r}")
        if not _ENV_NAME.fullmatch(key):
            raise ValueError(f"variable name {clip(key)!r} must be non-empty, without `=` or NUL")
        text(item, f"the value of variable {clip(key)!r}")
        size = len(key) + 1 + len(item)
        if size > ENV_ENTRY_MAX:
            raise ValueError(f"variable {clip(key)!r} is {size:,} characters, above the limit of {ENV_ENTRY_MAX:,}")
        total += size
    if total > ENV_TOTAL_MAX:
        raise ValueError(f"{total:,} characters in all, above the limit of {ENV_TOTAL_MAX:,}")
    return value


def arguments(value: list[str]) -> list[str]:
    """A command line: at most 256 arguments, each at most 32 KiB, all of them at most 64 KiB."""
    if len(value) > ARGS_MAX:
        raise ValueError(f"{len(value):,} arguments, above the limit of {ARGS_MAX}")
    total = 0
    for index, item in enumerate(value):
        _bounded(item, ARG_MAX, f"argument {index}")
        total += len(item)
    if total > ARGS_TOTAL_MAX:
        raise ValueError(f"{total:,} characters in all, above the limit of {ARGS_TOTAL_MAX:,}")
    return value


def _each(maximum_items: int, maximum_length: int, what: str) -> AfterValidator:
    def check(value: list[str]) -> list[str]:
        if len(value) > maximum_items:
            raise ValueError(f"{len(value):,} {what}, above the limit of {maximum_items}")
        for index, item in enumerate(value):
            _bounded(item, maximum_length, f"{what[:-1]} {index}")
        return value

    return AfterValidator(check)


ImageReference = Annotated[str, AfterValidator(image_reference)]
TenantName = Annotated[str, AfterValidator(tenant)]
Identifier = Annotated[str, AfterValidator(identifier)]
ModeName = Annotated[str, AfterValidator(mode_name)]
ShortText = Annotated[str, AfterValidator(short_text)]
Labels = Annotated[dict[str, str], AfterValidator(labels)]
Env = Annotated[dict[str, str], AfterValidator(env)]
Arguments = Annotated[list[str], AfterValidator(arguments)]
Mounts = Annotated[list[str], _each(MOUNTS_MAX, MOUNT_MAX, "mounts")]
Capabilities = Annotated[list[str], _each(CAPS_MAX, CAP_MAX, "capabilities")]
