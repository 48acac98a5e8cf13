"""The string limits of eru.domain.limits (docs/cli.md "Limits") and the codec's text checks (docs/bus.md "Bounded
decoding"): Docker's reference grammar, bounded lists and maps, short error messages, fields named on decode."""

from __future__ import annotations

import msgpack
import pytest

from eru.bus.codec import JSON, decode, encode_value
from eru.domain import DeployRequest
from eru.errors import InvalidInput

GOOD_IMAGES = [
    "busybox",
    "busybox:1.36",
    "eru-test/busybox:1",
    "registry.local:5000/team/web:1.2",
    "localhost/a__b.c-d",
    "[::1]:5000/x",
    "ghcr.io/o/p@sha256:" + "a" * 64,
    "x" * 255,
    "busybox:" + "t" * 128,
]
BAD_IMAGES = [
    ("", "must not be empty"),
    ("Busybox", "path component 'Busybox'"),
    ("busybox" + "x" * 300, "the image name is 307 characters, above Docker's limit of 255"),
    ("busybox:" + "t" * 129, "tag"),
    ("busybox:-x", "tag '-x'"),
    ("a//b", "path component ''"),
    ("busybox@sha256:abc", "digest"),
    ("x" * 120_000, "120,000 characters, above the limit of 520"),
    ("busy\ud800box", "lone surrogate U+D800"),
]


def workload(**fields: object) -> dict[str, object]:
    return {"pod": "p", "workload": {"name": "web", "image": "busybox", **fields}}


@pytest.mark.parametrize("image", GOOD_IMAGES)
def test_docker_references_are_accepted(image: str) -> None:
    assert DeployRequest.model_validate(workload(image=image)).workload.image == image


@pytest.mark.parametrize(("image", "reason"), BAD_IMAGES)
def test_bad_references_are_refused_naming_image_in_a_short_message(image: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        decode(encode_value(workload(image=image), JSON), DeployRequest, JSON)
    assert refused.value.field == "workload.image"
    assert reason in refused.value.reason
    assert len(refused.value.message) < 300


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"command": ["a"] * 257}, "workload.command", "257 arguments, above the limit of 256"),
        ({"command": ["x" * 40_000]}, "workload.command", "argument 0 is 40,000 characters"),
        ({"env": {f"V{i}": "x" * 1000 for i in range(70)}}, "workload.env", "in all, above the limit of 65,536"),
        ({"env": {"A=B": "1"}}, "workload.env", "without `=`"),
        ({"labels": {"k": "v" * 2000}}, "workload.labels", "the value of label 'k' is 2,000 characters"),
        ({"labels": {str(i): "" for i in range(65)}}, "workload.labels", "65 labels"),
        ({"tenant": "t" * 300}, "workload.tenant", "above the limit of 257"),
        ({"mounts": ["/a:/b"] * 65}, "workload.mounts", "65 mounts"),
        ({"name": "n" * 2000}, "workload.name", "at most 128 characters"),
    ],
)
def test_every_user_string_is_bounded(fields: dict[str, object], field: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        decode(encode_value(workload(**fields)), DeployRequest)
    assert refused.value.field == field
    assert reason in refused.value.reason, refused.value.reason
    assert len(refused.value.message) < 300


def test_a_lone_surrogate_key_and_non_utf8_bytes_are_named_on_decode() -> None:
    body = b'{"pod": "p", "workload": {"name": "web", "image": "busybox", "env": {"\\udc80": "x"}}}'
    with pytest.raises(InvalidInput) as refused:
        decode(body, DeployRequest, JSON)
    assert refused.value.field == "workload.env"
    assert "a key not UTF-8 text" in refused.value.reason
    packed = msgpack.packb({"pod": "p", "workload": {"name": "web", "image": "busybox", "command": [b"\xc3"]}})
    with pytest.raises(InvalidInput) as refused:
        decode(packed, DeployRequest)
    assert refused.value.field == "workload.command[0]"


def test_encoding_a_lone_surrogate_names_its_path() -> None:
    with pytest.raises(InvalidInput) as refused:
        encode_value({"rows": [{"id": "ok"}, {"id": "\ud800"}]})
    assert refused.value.field == "rows[1].id"
