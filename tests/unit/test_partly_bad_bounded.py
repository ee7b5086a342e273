"""A delivery's bad units are refused alone (PartlyBad), but only so many: past
MAX_REFUSED of them the delivery is refused whole, at once. Each refusal is an exception
with its message: a 1 MiB CloudEvents batch of ~350,000 members `1` (or S3 Records, or
registry events, alike) cost ~2 s of CPU and ~300 MB before its 400, every member refused
one by one, where the first bad member used to end it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from modelhooks.events import ingress
from modelhooks.events.errors import MAX_REFUSED, BadRequest, PartlyBad
from modelhooks.events.inbound import Inbound
from modelhooks.events.ingress import decode
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.sources._common import each
from modelhooks.events.sources.s3 import from_s3_notification

BATCH = {"content-type": "application/cloudevents-batch+json"}
GOOD = {"specversion": "1.0", "id": "e1", "source": "/s", "type": "t"}


def test_a_few_bad_members_are_refused_alone() -> None:
    with pytest.raises(PartlyBad) as refused:
        decode(BATCH, json.dumps([GOOD, *[1] * MAX_REFUSED]).encode())
    assert [m.id for m in refused.value.good] == ["e1"]


def test_a_batch_of_many_bad_members_is_refused_whole_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    structured, seen = ingress._structured, []

    def counted(item: Any, where: str, headers: Any) -> Inbound:
        seen.append(where)
        return structured(item, where, headers)

    monkeypatch.setattr(ingress, "_structured", counted)
    with pytest.raises(BadRequest) as refused:
        decode(BATCH, json.dumps([GOOD, *[1] * 100_000]).encode())
    assert not isinstance(refused.value, PartlyBad)
    assert f"more than {MAX_REFUSED}" in refused.value.message
    assert "batch[1]" in refused.value.message  # the first one's reason
    assert len(seen) == MAX_REFUSED + 2  # the good one, then no more than the bound


def test_units_past_the_bound_are_not_translated() -> None:
    seen: list[int] = []

    def one(n: int, unit: Any) -> None:
        seen.append(n)
        if unit != "good":
            raise BadRequest(f"unit {n} is bad")

    with pytest.raises(BadRequest) as refused:
        each(["good", *["bad"] * 10_000], one)
    assert not isinstance(refused.value, PartlyBad)
    assert "unit 1 is bad" in refused.value.message
    assert len(seen) == MAX_REFUSED + 2


def test_s3_records_past_the_bound_refuse_the_delivery() -> None:
    records = {"Records": [1] * 10_000}
    inbound = Inbound(kind="webhook", id="d", data=records, attributes={}, headers={})
    with pytest.raises(BadRequest) as refused:
        from_s3_notification(inbound, layout=ObjectLayout())
    assert f"more than {MAX_REFUSED}" in refused.value.message
