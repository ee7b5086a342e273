"""`modelhooks replay` counts an event no function acted on, on purpose, as skipped: a push
of a prefix that holds no model (an upload aborted and cleaned up since, the event
dead-lettered then), a stale one, a Model paused. Its summary always said 'skipped 0',
such events counted as succeeded, so a dead-letter folder replayed after its models were
gone read 'succeeded N' though nothing was done."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelhooks import bootstrap
from modelhooks.cli import main
from modelhooks.events import samples
from tests.local_store import lay_model


def gone(tmp_path: Path, n: int) -> Path:
    """`n` pushes of versions whose prefix holds nothing, and one of a model laid there."""
    doc = samples.load("canonical-artifact-pushed")
    lines = []
    for i in range(n + 1):
        version = "1" if i == n else f"gone-{i}"
        event = json.loads(json.dumps(doc))
        event["id"] = f"dead-{i}"
        event["data"]["version"] = version
        event["data"]["uri"] = f"gs://models/models/sentiment/{version}/"
        lines.append(json.dumps(event))
    source = tmp_path / "dead-letters.jsonl"
    source.write_text("\n".join(lines) + "\n")
    return source


def replay(home: Path, source: Path, *args: str) -> int:
    return main(["replay", "--home", str(home), "--quiet", str(source), *args])


def test_a_skipped_event_is_counted_skipped_in_process(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lay_model(home, "models", "models/sentiment/1")
    assert replay(home, gone(tmp_path, 3)) == 0  # nothing to send again: not a failure
    err = capsys.readouterr().err
    assert "sent 4, succeeded 1, failed 0, skipped 3" in err, err
    for i in range(3):  # each with its reason
        assert f"1 x skipped: nothing under gs://models/models/sentiment/gone-{i}/" in err, err


@pytest.fixture
def served(home: Path) -> Iterator[str]:
    """`modelhooks serve`'s app on a loopback port: its URL."""
    from werkzeug.serving import make_server

    from modelhooks.delivery.http import create_app

    bootstrap.reset()
    server = make_server("127.0.0.1", 0, create_app(bootstrap.build().broker()), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        thread.join()


@pytest.mark.parametrize("route", ["", "functions/register"])
def test_a_skipped_event_is_counted_skipped_through_a_server(
    home: Path, tmp_path: Path, served: str, route: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The broker's route answers every outcome of the chain, a function's route the skips
    alone (`{"skipped": [...]}`): both are read."""
    lay_model(home, "models", "models/sentiment/1")
    assert replay(home, gone(tmp_path, 2), "--to", served + route) == 0
    err = capsys.readouterr().err
    assert "sent 3, succeeded 1, failed 0, skipped 2" in err, err
    for i in range(2):
        assert f"1 x skipped: nothing under gs://models/models/sentiment/gone-{i}/" in err, err


def test_raw_documents_answered_2xx_count_as_succeeded_or_skipped(
    home: Path, tmp_path: Path, served: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--raw` (the README's example: a MinIO notification as MinIO sent it) named each
    answer's reason by its document, an empty one too, so every document answered 2xx
    counted as failed with the reason '<file>: ', exit 2."""
    lay_model(home, "models", "models/sentiment/1")
    minio = json.loads(samples.body("s3-minio-put-marker"))  # models/sentiment/1/_SUCCESS
    gone = json.loads(json.dumps(minio))
    record = gone["Records"][0]["s3"]["object"]
    record["key"], record["sequencer"] = "models%2Fsentiment%2Fgone%2F_SUCCESS", "2"
    source = tmp_path / "stored.jsonl"
    source.write_text(json.dumps(minio) + "\n" + json.dumps(gone) + "\n")
    assert replay(home, source, "--raw", "--to", served) == 0
    err = capsys.readouterr().err
    assert "sent 2, succeeded 1, failed 0, skipped 1" in err, err
    assert "1 x skipped: nothing under s3://models/models/sentiment/gone/" in err, err
