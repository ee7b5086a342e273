"""watch-models retries a delivery refused as transient, as a Knative Trigger does; when the
retries are spent its Model is set aside (Unavailable: ModelWatcher sends it again later)
unless the target answered nothing meanwhile (the watch stops, exit 3, so a Pod restarts and
lists again); a permanent refusal is reported and the watch goes on."""

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
    assert watch_models._delivered(post, DOC, watch_models._Answers(), 0.5) == "ok"
    assert slept == [0.5, 1.0, 2.0]


def test_a_permanent_refusal_is_reported_not_retried(slept: list[float]) -> None:
    post = _post((400, "HTTP 400: bad Model"))
    assert watch_models._delivered(post, DOC, watch_models._Answers(), 0.5) == "HTTP 400: bad Model"
    assert slept == []


def test_spent_retries_answered_set_the_model_aside(slept: list[float]) -> None:
    post = _post(Unavailable("no answer"), *[(503, "HTTP 503: down")] * watch_models.RETRIES)
    with pytest.raises(Unavailable, match="not delivered after 6 retries: HTTP 503: down"):
        watch_models._delivered(post, DOC, watch_models._Answers(), 0.5)
    assert len(slept) == watch_models.RETRIES


def test_no_answer_to_any_delivery_stops_the_watch(slept: list[float]) -> None:
    answers = watch_models._Answers()
    post = _post(*[Unavailable("http://x/ did not answer: refused")] * (watch_models.RETRIES + 1))
    with pytest.raises(watch_models._TargetDown) as down:
        watch_models._delivered(post, DOC, answers, 0.1)
    assert isinstance(down.value.error, Unavailable)
    assert "not delivered after 6 retries: http://x/ did not answer" in down.value.error.message
    assert slept == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2]


def test_another_delivery_answered_meanwhile_sets_it_aside(slept: list[float]) -> None:
    answers = watch_models._Answers()
    refused = [Unavailable("no answer")] * (watch_models.RETRIES + 1)
    given = iter(refused)

    def post() -> tuple[int, str]:
        answers.add()  # another Model's delivery was answered while this one was retried
        raise next(given)

    with pytest.raises(Unavailable):
        watch_models._delivered(post, DOC, answers, 0.5)
