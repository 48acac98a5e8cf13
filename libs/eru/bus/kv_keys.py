"""A KV bucket's keys in one answer of the server, never through a watcher (docs/replicas.md "Listing the
heartbeats").

nats-py's `KeyValue.keys()` replays the bucket through an ordered consumer and stops at the first "nothing more
pending" mark. In nats-py 2.16 that mark can come too early (nats-io/nats.py#842, fix proposed in #995): messages
still in flight when the consumer's info is read, or a message whose pending count reads 0 while others still
follow (a key rewritten during the replay). The listing then holds only some of the keys, or none (NoKeysError).
On a real server with two writers rewriting 3 keys, 35 of 300 `keys()` calls came back short.

Here the stream's own subject index answers instead: `STREAM.INFO` with a subjects filter counts every subject
holding a message, under the store's lock, in one reply. A key being rewritten always holds a message (the new one
is stored before the old one goes), so no existing key can be missing. A deleted or purged key still holds its
marker: `live_entries` reads each key and drops those (nats-py's `get` raises `KeyNotFoundError` for them), as well
as keys that expired between the listing and the read.
"""

from __future__ import annotations

import asyncio

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from eru.errors import EruError

# The most subjects one STREAM.INFO reply names (nats-server's JSMaxSubjectDetails); past it the server pages.
MAX_SUBJECT_DETAILS = 100_000


class KeyListingTooLong(EruError):
    """The bucket holds more keys under the prefix than one server answer names."""


async def kv_keys(js: JetStreamContext, bucket: str, prefix: str = "", call_timeout: float | None = None) -> list[str]:
    """Every key of `bucket` starting with `prefix` that holds a message now (a deleted key's marker included),
    sorted; [] when there is none. `prefix` ends at a token boundary (`"replicas."`) or is empty; `call_timeout`
    bounds the request (else the JetStream context's own)."""
    subject_prefix = f"$KV.{bucket}."
    request = js.stream_info(f"KV_{bucket}", subjects_filter=f"{subject_prefix}{prefix}>")
    info = await asyncio.wait_for(request, call_timeout)
    subjects = info.state.subjects or {}
    if len(subjects) >= MAX_SUBJECT_DETAILS:
        # a second page would be read at another moment: no longer one answer, so refuse rather than guess
        raise KeyListingTooLong(f"bucket {bucket}: {len(subjects)}+ keys under {prefix!r}, more than one listing holds")
    return sorted(subject[len(subject_prefix) :] for subject in subjects)


async def live_entries(
    js: JetStreamContext,
    kv: KeyValue,
    bucket: str,
    prefix: str = "",
    *,
    skip: frozenset[str] = frozenset(),
    call_timeout: float | None = None,
) -> dict[str, KeyValue.Entry]:
    """key → last entry of every key of `bucket` under `prefix` that is neither deleted, purged nor expired: one
    listing, then one read per key, each bounded by `call_timeout`. Keys in `skip` are left out unread."""
    entries = {}
    for key in await kv_keys(js, bucket, prefix, call_timeout):
        if key in skip:
            continue
        try:
            entries[key] = await asyncio.wait_for(kv.get(key), call_timeout)
        except KeyNotFoundError:  # deleted or purged (its marker), or expired since the listing
            continue
    return entries
