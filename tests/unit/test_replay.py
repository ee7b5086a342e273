"""`modelhooks replay`: sources, filters, dry run, the summary — and a second replay of the
same events changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.cli import main
from modelhooks.events import samples
from tests.local_store import lay_model

pytestmark = pytest.mark.usefixtures("sample_models")

SAMPLES = Path(samples.__file__).parent


def snapshot(home: Path) -> list[tuple[str, str, str, str]]:
    registry = SqliteModelRegistry(home / "registry.db")
    rows = []
    for model in registry.list_models():
        for version in registry.list_versions(model.id):
            rows.append((model.name, model.state.value, version.name, version.state.value))
            rows += [
                (model.name, a.uri, a.digest, a.state.value)
                for a in registry.list_artifacts(version.id)
            ]
    registry.close()
    return sorted(rows)


def replay(home: Path, *args: str) -> int:
    return main(
        [
            "replay",
            "--home",
            str(home),
            "--quiet",
            "--ingress-registry-host",
            "zot.local:5000",
            *args,
        ]
    )


def test_replaying_the_samples_twice_changes_nothing_the_second_time(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert replay(home, str(SAMPLES)) == 0
    first = snapshot(home)
    assert first, "the samples registered nothing"
    err = capsys.readouterr().err
    assert "failed 0" in err
    assert replay(home, str(SAMPLES)) == 0
    assert snapshot(home) == first


def test_jsonl_stdin_type_filter_and_dry_run(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    lines = "\n".join(
        json.dumps(samples.load(n)) for n in ("gcs-pubsub-finalize-marker", "k8s-resource-delete")
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    assert replay(home, "-", "--dry-run", "--type", "dev.modelhooks.model.deleted") == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["type"] for o in out] == ["dev.modelhooks.model.deleted"]
    assert not (home / "registry.db").exists() or snapshot(home) == []


def test_since_and_until_select_by_event_time(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = str(SAMPLES / "canonical-artifact-pushed.json")  # time 2026-11-23T17:02:11Z
    assert replay(home, source, "--dry-run", "--since", "2026-11-23T18:00:00+00:00") == 0
    assert capsys.readouterr().out == ""
    assert replay(home, source, "--dry-run", "--until", "2026-11-23T18:00:00+00:00") == 0
    assert "replay-0001" in capsys.readouterr().out


def test_a_document_that_does_not_translate_is_a_failure_with_its_reason(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    good = json.dumps(samples.load("canonical-artifact-pushed"))
    bad.write_text(
        good + "\n" + json.dumps({"specversion": "1.0", "id": "x", "source": "s"}) + "\n"
    )
    assert replay(home, str(bad)) == 2  # refused: bad input
    err = capsys.readouterr().err
    assert "sent 1, succeeded 1, failed 1" in err
    assert "bad.jsonl:2" in err and "'type'" in err


def test_replay_to_a_url_that_refuses_reports_why(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = str(SAMPLES / "canonical-artifact-pushed.json")
    assert replay(home, source, "--to", "http://127.0.0.1:9/") == 3  # transient
    assert "http://127.0.0.1:9/ did not answer: Connection refused" in capsys.readouterr().err


def test_a_missing_source_is_a_clear_error(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay(home, str(home / "nope.json")) == 2
    assert "is not a file, a directory or '-'" in capsys.readouterr().err


def test_registry_list_and_show(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from modelhooks.cli import main

    assert replay(home, str(SAMPLES / "canonical-artifact-pushed.json")) == 0
    capsys.readouterr()
    assert main(["registry", "list", "--home", str(home)]) == 0
    listing = capsys.readouterr().out
    assert "SIGNED_BY" in listing and "sentiment" in listing
    assert main(["registry", "show", "sentiment/1", "--home", str(home)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "sentiment" and [v["name"] for v in shown["versions"]] == ["1"]
    assert shown["versions"][0]["artifacts"][0]["digest"].startswith("content-sha256:")
    assert main(["registry", "show", "nope", "--home", str(home)]) == 2


def test_hostile_stored_files_are_reported_and_the_rest_is_sent(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file nested past json's recursion stopped the whole replay with an internal error;
    a JSON Lines file whose string held U+2028 (json.dumps(ensure_ascii=False) writes it raw)
    was cut there by splitlines, losing both documents; a byte-order mark refused the file."""
    stored = tmp_path / "stored"
    stored.mkdir()
    (stored / "a-deep.json").write_text("[" * 100_000 + "]" * 100_000)
    event = samples.load("canonical-artifact-pushed")
    noted = {**event, "id": "replay-u2028", "note": "a\u2028b\u0085c"}
    (stored / "b-lines.jsonl").write_text(
        json.dumps(event, ensure_ascii=False) + "\n" + json.dumps(noted, ensure_ascii=False),
        encoding="utf-8",
    )
    (stored / "c-bom.json").write_text(json.dumps(event), encoding="utf-8-sig")
    assert replay(home, str(stored), "--dry-run") == 2
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o.get("id") for o in out] == [None, "replay-0001", "replay-u2028", "replay-0001"]
    assert "a-deep.json" in out[0]["error"] and "recursion" in out[0]["error"]


def test_a_bad_record_is_reported_and_its_neighbours_sent(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s3 = samples.load("s3-minio-put-marker")
    broken = json.loads(json.dumps(s3["Records"][0]))
    del broken["s3"]["object"]["key"]
    stored = tmp_path / "s3.json"
    stored.write_text(json.dumps({**s3, "Records": [broken, s3["Records"][0]]}))
    assert replay(home, str(stored)) == 2
    err = capsys.readouterr().err
    assert "sent 1, succeeded 1, failed 1" in err and "s3 record 0: s3.object.key" in err
    event = samples.load("canonical-artifact-pushed")
    stored.write_text(json.dumps([{**event, "specversion": "0.3"}, event]))  # a batch
    assert replay(home, str(stored), "--dry-run") == 2
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "batch[0]: specversion" in out[0]["error"] and out[1]["id"] == "replay-0001"


def test_only_regular_files_of_a_directory_are_read_and_huge_ones_refused(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO named *.json blocked the replay for good (a link to /dev/zero read forever);
    a file over the limit is refused unread."""
    import os
    import threading

    stored = tmp_path / "stored"
    stored.mkdir()
    (stored / "good.json").write_text(json.dumps(samples.load("canonical-artifact-pushed")))
    os.mkfifo(stored / "fifo.json")
    with open(stored / "huge.json", "wb") as f:  # sparse: no disk
        f.truncate((1 << 30) + 1)
    blocked, done = threading.Event(), threading.Event()

    def unblock() -> None:  # a reader waiting on the FIFO: say so, and let it go
        while not done.is_set():
            try:
                os.close(os.open(stored / "fifo.json", os.O_WRONLY | os.O_NONBLOCK))
                blocked.set()
            except OSError:  # no reader (ENXIO)
                done.wait(0.05)

    watcher = threading.Thread(target=unblock)
    watcher.start()
    try:
        assert replay(home, str(stored), "--dry-run") == 2
    finally:
        done.set()
        watcher.join()
    assert not blocked.is_set()
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out[0]["id"] == "replay-0001" and "huge.json: over 1073741824 bytes" in out[1]["error"]


def test_a_model_refused_for_good_and_told_on_it_is_counted_refused(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """register answers a Model's version it refuses for good with 200 and a `model.refused`
    (so notify can say why on the Model); replay counted it as succeeded and exited 0. Here
    notify has no cluster access: no Model is told, so notify fails it (register's 409), naming why."""
    created = samples.load("k8s-resource-add")
    assert replay(home, str(SAMPLES / "k8s-resource-add.json")) == 0
    capsys.readouterr()
    other = json.loads(json.dumps(created))  # the same name and version, another source
    other["id"] = "another-delivery"
    other["data"]["metadata"]["uid"] = "another-uid"
    other["data"]["spec"]["source"] = {"gcs": {"uri": "gs://models/models/other/1/"}}
    lay_model(home, "models", "models/other/1")
    source = tmp_path / "other.json"
    source.write_text(json.dumps(other))
    assert replay(home, str(source)) == 2  # refused: sending it again will not help
    err = capsys.readouterr().err
    assert "sent 1, succeeded 0, failed 1" in err, err
    told = "notify (409): no Model to tell register's refusal of ml/sentiment version '1'"
    assert told in err and "no cluster access" in err and "another digest" in err, err


def test_a_refusal_told_in_an_answer_is_read_from_its_replies() -> None:
    """Sent to a server (`--to`), the refusal is in the 200's reply: one (binary mode) or a
    batch; other replies, a skip's body and an error page tell none."""
    from modelhooks.cli.common import told_refusals
    from modelhooks.delivery.encoding import encode_replies
    from modelhooks.events.model import CanonicalEvent, ModelRefused, ModelRegistered

    def event(data: Any, id_: str) -> CanonicalEvent:
        return CanonicalEvent(id=id_, source="test", type=data.TYPE, data=data)

    refused = event(ModelRefused(model="m", version="1", refused="conflict: taken"), "r")
    registered = event(
        ModelRegistered(
            model="m",
            version="2",
            uri="gs://b/m/2/",
            digest="d",
            registry="sqlite",
            registered_model_id="1",
            model_version_id="2",
            model_artifact_id="3",
            created=True,
        ),
        "ok",
    )
    for replies, told in (
        ([refused], "refused for good, told as a reply: conflict: taken"),
        ([registered, refused], "refused for good, told as a reply: conflict: taken"),
        ([registered], ""),
    ):
        answer = encode_replies(replies)
        assert told_refusals(answer.headers, answer.body) == told
    assert told_refusals({"Content-Type": "application/json"}, b'{"skipped": []}') == ""
    assert told_refusals({"Content-Type": "text/html"}, b"<html>ok</html>") == ""
