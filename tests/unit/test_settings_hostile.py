"""Settings a user gets wrong: each refused at start-up with a ConfigError naming the
variable or the file's key, never accepted to fail at the first delivery or to hang."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelhooks.core.errors import ConfigError
from modelhooks.core.settings import FOREVER, SettingSpec, describe, load_settings
from modelhooks.events import samples

DURATIONS = [s for s in describe() if s.description.startswith("seconds")]


def test_the_durations_are_found() -> None:
    names = {s.name for s in DURATIONS}
    assert {"ingress.max_future_skew", "router.timeout", "serve.read_timeout"} <= names
    assert len(DURATIONS) == 9


@pytest.mark.parametrize("value", ["inf", "1e20", str(FOREVER + 1)])
@pytest.mark.parametrize("spec", DURATIONS, ids=lambda s: s.name)
def test_an_endless_duration_is_refused_naming_the_variable(spec: SettingSpec, value: str) -> None:
    with pytest.raises(ConfigError, match=f"invalid setting {spec.env}="):
        load_settings(env={spec.env: value})


def test_the_longest_future_skew_still_lets_deliveries_in(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ingress.max_future_skew=inf was taken, and every delivery answered 500 (a timedelta
    overflowed): a duration's bound is one its consumers take."""
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app

    monkeypatch.setenv("MODELHOOKS_INGRESS_MAX_FUTURE_SKEW", str(FOREVER))
    client = create_app(build().broker()).test_client()
    body = json.dumps(samples.load("canonical-artifact-pushed"))
    answer = client.post("/", data=body, headers={"Content-Type": "application/cloudevents+json"})
    assert answer.status_code == 200, answer.get_data(as_text=True)
