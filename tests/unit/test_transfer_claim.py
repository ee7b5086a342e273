"""A destination's claim (adapters.transfer.stores.claim) over a store that keeps objects in
a dict, conditional writes as S3 and GCS answer them: the first source claims, the same
source finds its claim, another is refused naming the destination and the claim; a claim
no run wrote (not JSON, no source) refuses every source; one deleted between the refused
write and the read is written again. tests/integration/test_transfer_claim.py runs the
claim on MinIO and fake-gcs-server, two transfers at once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from modelhooks.adapters.transfer.run import source_key
from modelhooks.adapters.transfer.stores import CLAIM, claim
from modelhooks.core.errors import Conflict, NotFound


class Store:
    """put(if_absent) and read_range as the object-store port has them."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}
        self.vanish = 0  # reads that find the object deleted first

    def put(self, bucket: str, key: str, data: bytes, *, if_absent: bool = False) -> None:
        if if_absent and (bucket, key) in self.objects:
            raise Conflict(f"{bucket}/{key} already exists")
        self.objects[bucket, key] = data

    def read_range(self, bucket: str, key: str, start: int, length: int) -> bytes:
        if self.vanish:
            self.vanish -= 1
            self.objects.pop((bucket, key), None)
        if (bucket, key) not in self.objects:
            raise NotFound(f"{bucket}/{key}")
        return self.objects[bucket, key][start : start + length]


def held(store: Store, key: str = f"models/m/1{CLAIM}") -> Any:
    return json.loads(store.objects["out", key])


def test_the_first_source_claims_the_same_finds_it_another_is_refused() -> None:
    store = Store()
    claim(store, "s3", "out", "models/m/1", "s3://staging/a", "run-1")
    assert held(store)["source"] == "s3://staging/a" and held(store)["run"] == "run-1"
    claim(store, "s3", "out", "models/m/1", "s3://staging/a", "run-2")  # a retry: goes on
    assert held(store)["run"] == "run-1"  # the claim is not rewritten
    with pytest.raises(Conflict) as caught:
        claim(store, "s3", "out", "models/m/1", "s3://staging/b", "run-3")
    refused = caught.value
    assert refused.details["field"] == "destination"
    assert refused.details["destination"] == "s3://out/models/m/1"
    assert refused.details["claim"] == f"s3://out/models/m/1{CLAIM}"
    assert refused.details["claimed_by"] == "s3://staging/a"
    assert f"delete s3://out/models/m/1{CLAIM} and the objects under s3://out/models/m/1/" in (
        refused.message
    )
    assert held(store)["source"] == "s3://staging/a"


@pytest.mark.parametrize(
    "body", [b"", b"not json", b"[1]", b'{"source": 3}', b'{"run": "x"}', b"{" * 70_000]
)
def test_a_claim_no_run_wrote_refuses_every_source(body: bytes) -> None:
    store = Store()
    store.objects["out", f"m{CLAIM}"] = body
    for source in ("s3://staging/a", "(unreadable)", "(unreadable: no transfer wrote it)"):
        with pytest.raises(Conflict, match=r"\(unreadable: no transfer wrote it\)"):
            claim(store, "gs", "out", "m", source, "run")
    assert store.objects["out", f"m{CLAIM}"] == body  # left for a person to clear


def test_a_claim_deleted_between_the_write_and_the_read_is_written_again() -> None:
    store = Store()
    claim(store, "s3", "out", "m", "s3://staging/a", "run-1")
    store.vanish = 1
    claim(store, "s3", "out", "m", "s3://staging/b", "run-2")  # cleared: b claims it
    assert held(store, f"m{CLAIM}")["source"] == "s3://staging/b"


def test_a_destination_at_the_bucket_root_is_claimed_there() -> None:
    store = Store()
    claim(store, "s3", "out", "", "s3://staging/a", "run")
    assert ("out", CLAIM) in store.objects
    with pytest.raises(Conflict) as caught:  # what to delete, as a person would type it
        claim(store, "s3", "out", "", "s3://staging/b", "run")
    assert caught.value.message.endswith(f"delete s3://out/{CLAIM} and the objects under s3://out/")


@pytest.mark.parametrize(
    ("uri", "key"),
    [
        ("s3://staging/a/", "s3://staging/a"),
        (
            "https://u:p@Host.example/m.tar?X-Amz-Signature=1&X-Amz-Date=2#f",
            "https://Host.example/m.tar",
        ),
        ("HTTPS://host/m.zip", "https://host/m.zip"),
        ("oci://reg/ml/m:1", "oci://reg/ml/m:1"),
        ("/data/model/", "/data/model"),
    ],
)
def test_a_source_is_named_without_what_changes_between_runs_of_it(uri: str, key: str) -> None:
    assert source_key(uri) == key
