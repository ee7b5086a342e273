"""`modelhooks replay` of a source that holds no event to send says why: it said 'nothing
matched the filters' with no filter given, for an empty folder, a folder of other files
(the wrong one named), and documents that translate to no event alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelhooks.cli import main
from modelhooks.events import samples


def replay(home: Path, *args: str) -> int:
    return main(["replay", "--home", str(home), "--quiet", *args])


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_a_source_without_documents_says_so(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], dry_run: list[str]
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text('{"Records": []}')
    for source in ("empty", "other"):
        assert replay(home, str(tmp_path / source), *dry_run) == 0  # nothing to send again
        err = capsys.readouterr().err
        assert f"no stored events in {tmp_path / source}" in err, err
        assert "filters" not in err, err


def test_documents_that_translate_to_no_event_say_so(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ignored = tmp_path / "ignored.json"  # S3's test event: a configuration saved, no change
    ignored.write_text(samples.body("s3-test-event").decode())
    assert replay(home, str(ignored)) == 0
    err = capsys.readouterr().err
    assert "1 documents read, none is an event to send" in err, err
    assert "filters" not in err, err
    pushed = str(Path(samples.__file__).parent / "canonical-artifact-pushed.json")
    assert replay(home, pushed, "--since", "2099-01-01") == 0
    assert "1 documents read, none matched the filters" in capsys.readouterr().err
