"""A real `modelhooks dead-letter` whose stdout's reader is gone (the log pipeline ended):
each event is kept and answered 202. Its copy to stdout raised BrokenPipeError after the
event was written, so every delivery was answered 500: the Broker sent each again and
again, kept each time, then gave up on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.servers._proc import free_port

MODELHOOKS = str(Path(sys.executable).parent / "modelhooks")


def test_events_are_kept_and_acknowledged_when_stdout_is_gone(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    read, write = os.pipe()
    sink = subprocess.Popen(
        [MODELHOOKS, "dead-letter", "--port", str(port)],
        stdout=write,
        stderr=subprocess.PIPE,
        env={**env, "MODELHOOKS_HOME": str(tmp_path / "home")},
    )
    os.close(write)
    try:
        assert sink.stderr is not None
        banner = sink.stderr.readline()
        assert b"modelhooks dead-letter on" in banner, banner
        os.close(read)  # the log pipeline goes away
        statuses = []
        for n in range(3):
            body = {"specversion": "1.0", "id": f"e{n}", "source": "s", "type": "t"}
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/cloudevents+json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    statuses.append(answer.status)
            except urllib.error.HTTPError as refused:
                statuses.append(refused.code)
                refused.close()
    finally:
        sink.terminate()
        _, err = sink.communicate(timeout=30)
    assert statuses == [202, 202, 202], err.decode(errors="replace")[-2000:]
    kept = [
        json.loads(line)["id"]
        for f in (tmp_path / "home" / "dead-letter").iterdir()
        for line in f.read_text().splitlines()
    ]
    assert kept == ["e0", "e1", "e2"]
    assert err.count(b"no copies on stdout from now on") == 1
