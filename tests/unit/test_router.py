from __future__ import annotations

from pathlib import Path

import pytest

from modelhooks.core.errors import ConfigError
from modelhooks.delivery.router import Trigger, load_triggers, matches
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted, ModelRegistered
from modelhooks.handlers import NAMES

ATTRS = {
    "type": "dev.modelhooks.artifact.pushed",
    "source": "//storage.googleapis.com/b",
    "subject": "objects/m/1/_SUCCESS",
}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ({"exact": {"type": "dev.modelhooks.artifact.pushed"}}, True),
        ({"exact": {"type": "dev.modelhooks.artifact.deleted"}}, False),
        ({"prefix": {"type": "dev.modelhooks.artifact."}}, True),
        ({"prefix": {"missing": ""}}, False),
        ({"suffix": {"subject": "_SUCCESS"}}, True),
        ({"suffix": {"subject": ".bin"}}, False),
        ({"all": [{"prefix": {"type": "dev."}}, {"suffix": {"subject": "_SUCCESS"}}]}, True),
        ({"all": [{"prefix": {"type": "dev."}}, {"suffix": {"subject": ".bin"}}]}, False),
        ({"any": [{"exact": {"type": "x"}}, {"suffix": {"subject": "_SUCCESS"}}]}, True),
        ({"not": {"exact": {"type": "dev.modelhooks.artifact.pushed"}}}, False),
    ],
)
def test_filter_dialects(expr: dict, expected: bool) -> None:
    assert matches(expr, ATTRS) is expected


def test_cesql_is_refused_loudly() -> None:
    with pytest.raises(ConfigError, match="cesql"):
        matches({"cesql": "type = 'x'"}, ATTRS)


def test_filters_win_over_filter_attributes() -> None:
    t = Trigger("t", "register", {"type": "nope"}, ({"prefix": {"type": "dev."}},))
    assert t.matches(ATTRS)


def test_repo_triggers_route_the_register_types() -> None:
    triggers = load_triggers()
    assert triggers, "infra/knative has no modelhooks triggers"
    assert {t.function for t in triggers} <= set(NAMES)
    pushed = CanonicalEvent.new(
        ArtifactPushed(model="m", version="1", uri="gs://b/m/1/", digest="d", store="gcs"),
        source="s",
    )
    deleted = CanonicalEvent.new(ModelDeleted(name="m"), source="s")
    registered = CanonicalEvent.new(
        ModelRegistered(
            model="m",
            version="1",
            uri="u",
            digest="d",
            registry="sqlite",
            registered_model_id="1",
            model_version_id="1",
            model_artifact_id="1",
            created=True,
        ),
        source="s",
    )
    to = lambda e: {t.function for t in triggers if t.accepts(e)}  # noqa: E731
    assert "register" in to(pushed)
    assert "register" in to(deleted)
    assert "register" not in to(registered)


def test_trigger_dir_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"router\.triggers"):
        load_triggers(tmp_path / "absent")
