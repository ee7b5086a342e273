"""functions-framework loads a target in gunicorn's master (where `main` builds its wiring,
so a bad setting stops start-up) and then forks the worker that serves. Threads do not
survive a fork and SQLite connections must not cross one: the worker builds its own wiring,
and its delivery log records what it delivered while it runs (its group commit is a thread).
Before, the worker used the master's log, whose flushing thread was gone: no delivery was
ever recorded, so durable dedupe did nothing on Cloud Run or Knative."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FF = str(Path(sys.executable).with_name("functions-framework"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(port: int, n: int) -> tuple[int, bytes]:
    data = {
        "model": "forked",
        "version": str(n),
        "uri": f"gs://models/forked/{n}/",
        "digest": f"content-sha256:{n:064x}",
        "store": "gcs",
    }
    headers = {
        "Content-Type": "application/json",
        "ce-specversion": "1.0",
        "ce-id": f"forked-{n}",
        "ce-source": "/test",
        "ce-type": "dev.modelhooks.artifact.pushed",
    }
    deadline = time.monotonic() + 30
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("POST", "/", body=json.dumps(data), headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        finally:
            conn.close()


def _recorded(home: Path) -> list[str]:
    path = home / "deliveries.db"
    if not path.exists():
        return []
    with sqlite3.connect(path, timeout=5) as db:
        try:
            return [row[0] for row in db.execute("SELECT id FROM deliveries ORDER BY id")]
        except sqlite3.OperationalError:  # the file made, its table not yet: none recorded
            return []


def test_the_worker_records_its_deliveries_while_it_runs(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    env |= {"MODELHOOKS_HOME": str(tmp_path), "MODELHOOKS_LOG_LEVEL": "WARNING"}
    argv = [FF, "--target", "register", "--source", str(ROOT / "functions" / "main.py")]
    server = subprocess.Popen(
        [*argv, "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        answers = [_post(port, n) for n in (1, 2, 1)]  # the third: a redelivery
        assert [status for status, _ in answers] == [200, 200, 200], answers
        assert answers[2][1] == answers[0][1]  # answered as the first time
        deadline = time.monotonic() + 10
        while _recorded(tmp_path) != ["forked-1", "forked-2"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _recorded(tmp_path) == ["forked-1", "forked-2"]  # while it runs, not at exit
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr.decode()[-2000:]
