"""watch-models retries a delivery refused as transient, as a Knative Trigger does, and stops
(exit 3, so a Pod restarts and lists again) when the retries are spent; a permanent refusal
is reported and the watch goes on."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from modelhooks.cli import watch_models
from modelhooks.core.errors import Unavailable

DOC = {"type": "dev.knative.apiserver.resource.add", "subject": "/apis/modelhooks.dev/m"}


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr(watch_models.time, "sleep", waits.append)
    return waits


def _post(*answers: tuple[int, str] | Exception) -> Callable[[], tuple[int, str]]:
    given = iter(answers)

    def post() -> tuple[int, str]:
        answer = next(given)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return post


def test_transient_refusals_are_retried_with_growing_waits(slept: list[float]) -> None:
    post = _post(
        (503, "HTTP 503: register not ready"), Unavailable("no answer"), (429, "slow"), (200, "")
    )
    assert watch_models._delivered(post, DOC) == "ok"
    assert slept == [0.5, 1.0, 2.0]


def test_a_permanent_refusal_is_reported_not_retried(slept: list[float]) -> None:
    post = _post((400, "HTTP 400: bad Model"))
    assert watch_models._delivered(post, DOC) == "HTTP 400: bad Model"
    assert slept == []


def test_spent_retries_stop_the_watch(slept: list[float]) -> None:
    post = _post(*[(503, "HTTP 503: down")] * (watch_models.RETRIES + 1))
    with pytest.raises(Unavailable, match="not delivered after 6 retries: HTTP 503: down"):
        watch_models._delivered(post, DOC)
    assert len(slept) == watch_models.RETRIES
