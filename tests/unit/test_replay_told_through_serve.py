"""`modelhooks replay --to` serve's broker route (`/`, as the README's example sends): a
Model's version refused for good and told on the Model (register's 200 with a
`model.refused`) counts as refused, as it does in-process (8d3a8cd). The broker answers
every outcome of the chain as JSON (`{"events", "outcomes"}`), no reply, so the refusal,
read from replies alone, went unseen: 'succeeded 1', exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelhooks.cli import main
from modelhooks.events import samples
from tests.local_store import lay_model
from tests.unit.test_replay_skipped import served

__all__ = ["served"]  # the fixture, used by name

pytestmark = pytest.mark.usefixtures("sample_models")


@pytest.mark.parametrize("route", ["", "functions/register"])
def test_a_refusal_told_on_the_model_through_serve_is_counted_refused(
    home: Path, tmp_path: Path, served: str, route: str, capsys: pytest.CaptureFixture[str]
) -> None:
    created = samples.load("k8s-resource-add")
    first = tmp_path / "created.json"
    first.write_text(json.dumps(created))
    other = json.loads(json.dumps(created))  # the same name and version, another source
    other["id"] = "another-delivery"
    other["data"]["metadata"]["uid"] = "another-uid"
    other["data"]["spec"]["source"] = {"gcs": {"uri": "gs://models/models/other/1/"}}
    lay_model(home, "models", "models/other/1")
    second = tmp_path / "other.json"
    second.write_text(json.dumps(other))

    def replay(source: Path) -> int:
        return main(["replay", "--home", str(home), "--quiet", str(source), "--to", served + route])

    assert replay(first) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert replay(second) == 2  # refused: sending it again will not help
    err = capsys.readouterr().err
    assert "sent 1, succeeded 0, failed 1" in err, err
    assert "another digest" in err, err
    if route:  # register's own endpoint: its 200 and reply, read as refused
        assert "refused for good, told as a reply: " in err, err
    else:  # the broker runs notify too, here without cluster access: no Model told, a 409
        assert "HTTP 409: notify (409): no Model to tell register's refusal" in err, err
