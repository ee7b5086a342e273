"""OCI references events and Models name: parsed as the distribution spec's grammar allows,
anything else a 400 naming the part (never a request with it)."""

from __future__ import annotations

import pytest

from modelhooks.adapters.oci.distribution import parse_uri
from modelhooks.core.errors import BadRequest

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "uri, parsed",
    [
        ("oci://r.example/models/bert", ("r.example", "models/bert", "latest")),
        ("oci://127.0.0.1:5000/a/b:v1.2-rc_1", ("127.0.0.1:5000", "a/b", "v1.2-rc_1")),
        (f"oci://[::1]:5000/a@{DIGEST}", ("[::1]:5000", "a", DIGEST)),
        (f"oci://h/a/b:v1@{DIGEST}", ("h", "a/b", DIGEST)),  # the digest wins
        ("oci://h/a__b/c-d.e", ("h", "a__b/c-d.e", "latest")),
        ("oci://h/a@sha512:" + "b" * 128, ("h", "a", "sha512:" + "b" * 128)),
    ],
)
def test_valid_references(uri: str, parsed: tuple[str, str, str]) -> None:
    assert parse_uri(uri) == parsed


@pytest.mark.parametrize(
    "uri, part",
    [
        ("oci://h/Models", "repository"),  # upper case
        ("oci://h/a\x80b", "repository"),  # not ASCII
        ("oci://h/a//b", "repository"),
        ("oci://h/../a", "repository"),
        ("oci://h/a:" + "x" * 129, "tag or digest"),
        ("oci://h/a:-x", "tag or digest"),
        ("oci://h/a@sha256", "tag or digest"),
        ("oci://h/a@md5:abc", "tag or digest"),  # not sha256 or sha512
        ("oci://h/a@sha512:" + "a" * 64, "tag or digest"),  # sha512's hex is 128 long
        ("oci://h/a@sha256:" + "A" * 64, "tag or digest"),  # upper-case hex
        ("oci://h h/a", "host"),
        ("oci://h:port/a", "host"),
        ("oci://[1:2:3]:5000/a", "host"),  # urlsplit's ValueError, a 500, where a URL was made
        ("oci:///a", "expected"),
        ("oci://h", "expected"),
    ],
)
def test_invalid_references_name_the_part(uri: str, part: str) -> None:
    with pytest.raises(BadRequest, match=part):
        parse_uri(uri)
