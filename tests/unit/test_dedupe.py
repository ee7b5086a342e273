"""Dedupe: a key seen again with other content is a Conflict when the first delivery did
something (its replies stand), and is handled anew when it was answered with nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelhooks.adapters.idempotency.sqlite import SqliteDeliveryLog
from modelhooks.core.errors import Conflict
from modelhooks.delivery.dedupe import Dedupe
from modelhooks.events.model import ArtifactPushed, CanonicalEvent

KEY = ("register", "/src", "id-1")
REPLY = CanonicalEvent.new(
    ArtifactPushed(model="m", version="1", uri="gs://b/m/1/", digest="d", store="gcs"),
    source="modelhooks/register",
    id="id-1/registered",
)


def test_other_content_under_a_key_answered_with_nothing_is_handled_anew() -> None:
    dedupe = Dedupe(10)
    dedupe.put(KEY, "first", ())
    assert dedupe.get(KEY, "first") == ()  # the same content: the first answer
    assert dedupe.get(KEY, "second") is None  # other content, nothing done: anew


def test_so_it_is_after_a_restart(tmp_path: Path) -> None:
    log = SqliteDeliveryLog(tmp_path / "deliveries.db", 100)
    try:
        Dedupe(10, log).put(KEY, "first", ())
        log.flush()
        restarted = Dedupe(10, log)  # the log alone remembers
        assert restarted.get(KEY, "first") == ()
        assert restarted.get(KEY, "second") is None
    finally:
        log.close()


def test_other_content_under_a_key_that_did_something_is_a_conflict() -> None:
    dedupe = Dedupe(10)
    dedupe.put(KEY, "first", (REPLY,))
    assert dedupe.get(KEY, "first") == (REPLY,)
    with pytest.raises(Conflict, match="delivered before with other content"):
        dedupe.get(KEY, "second")
