"""`listed`: what an index reaches, through the indexes it lists, each once and bounded,
whatever shape a registry's answer has (a hostile one's included)."""

from __future__ import annotations

from typing import Any

import pytest

from modelhooks.adapters.oci.distribution import (
    MAX_INDEX_READS,
    MAX_NESTING,
    OCI_INDEX,
    OCI_MANIFEST,
    listed,
)
from modelhooks.core.errors import BadRequest, NotFound


class Manifests:
    """Manifests by digest, counting reads."""

    def __init__(self, **by_digest: dict[str, Any]) -> None:
        self.by_digest, self.reads = by_digest, 0

    def manifest(self, repo: str, ref: str) -> tuple[dict[str, Any], str, int]:
        self.reads += 1
        if ref not in self.by_digest:
            raise NotFound(ref)
        return self.by_digest[ref], ref, 1


def index(*entries: tuple[str, str]) -> dict[str, Any]:
    return {
        "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": m, "digest": d} for m, d in entries],
    }


def test_a_plain_index_reads_nothing() -> None:
    registry = Manifests()
    top = index((OCI_MANIFEST, "a"), (OCI_MANIFEST, "b"), (OCI_MANIFEST, "a"))
    assert listed(top, registry, "r") == ("a", "b") and registry.reads == 0


def test_grandchildren_are_reached_once_and_a_gone_index_lists_nothing() -> None:
    registry = Manifests(
        i1=index((OCI_MANIFEST, "m1"), (OCI_INDEX, "i2")),
        i2=index((OCI_MANIFEST, "m2"), (OCI_INDEX, "i1")),  # a loop: each once
    )
    top = index((OCI_INDEX, "i1"), (OCI_INDEX, "gone"))
    assert listed(top, registry, "r") == ("i1", "gone", "m1", "i2", "m2")


def test_nesting_is_bounded_and_past_it_nothing_is_decided() -> None:
    """Indexes nested MAX_NESTING deep under the one read are followed (MAX_NESTING reads);
    one more, or more than MAX_INDEX_READS indexes, is a BadRequest naming the bound and
    the reference (a shorter list would let cleanup or prune delete what a tag still
    reaches)."""
    assert MAX_NESTING == 7  # README and the closing notes say 7 levels
    chain = {f"i{n}": index((OCI_INDEX, f"i{n + 1}")) for n in range(MAX_NESTING * 3)}
    chain[f"i{MAX_NESTING - 1}"] = index((OCI_MANIFEST, "leaf"))
    registry = Manifests(**chain)
    found = listed(index((OCI_INDEX, "i0")), registry, "r")
    assert found[-1] == "leaf" and registry.reads == MAX_NESTING
    deeper = Manifests(**{**chain, f"i{MAX_NESTING - 1}": index((OCI_INDEX, "x"))})
    with pytest.raises(BadRequest, match=f"^r:v1: .* past {MAX_NESTING} levels") as caught:
        listed(index((OCI_INDEX, "i0")), deeper, "r", ref="v1")
    assert caught.value.details == {"repository": "r", "reference": "v1"}
    assert deeper.reads == MAX_NESTING  # refused before the read one level too deep
    digest = "sha256:" + "a" * 64
    with pytest.raises(BadRequest, match=f"^r@{digest}: "):
        listed(index((OCI_INDEX, "i0")), deeper, "r", ref=digest)
    wide = index(*((OCI_INDEX, f"w{n}") for n in range(MAX_INDEX_READS + 1)))
    with pytest.raises(BadRequest):
        listed(wide, Manifests(), "r")
    assert (
        len(listed(index(*((OCI_MANIFEST, f"m{n}") for n in range(5000))), Manifests(), "r"))
        == 5000
    )


@pytest.mark.parametrize(
    "top",
    [
        {"manifests": 5},
        {"manifests": "abc"},
        {"manifests": [1, None, "x", {"digest": 7}, {"digest": ""}, {"mediaType": OCI_INDEX}]},
        {"manifests": [{"mediaType": OCI_INDEX, "digest": "odd"}]},
    ],
)
def test_odd_shapes_list_what_they_can(top: dict[str, Any]) -> None:
    registry = Manifests(odd=[1, 2])  # type: ignore[arg-type]  # a registry answering a list
    found = listed(top, registry, "r")
    assert all(isinstance(d, str) and d for d in found)
