"""The harness itself, without servers: cache location, build lock, errors, sink, CA."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.servers import CertificateAuthority, NotificationSink
from tests.servers._cache import RecipeError, build_lock, cache_root, run


def test_cache_root_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MODELHOOKS_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("MODELHOOKS_CACHE")
    assert cache_root() == tmp_path / "xdg" / "modelhooks"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "modelhooks"


def test_build_lock_serialises_processes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MODELHOOKS_CACHE", str(tmp_path))
    waiter = (
        "import time; from tests.servers._cache import build_lock\n"
        "with build_lock(): print(time.time())\n"
    )
    with build_lock():
        child = subprocess.Popen(
            [sys.executable, "-c", waiter],
            cwd=Path(__file__).parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)
        released = time.time()
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert float(out) >= released
    assert b"waiting for" in err


def test_failed_step_names_server_command_and_output() -> None:
    with pytest.raises(RecipeError) as failed:
        run("demo", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"], quiet=True)
    text = failed.value.diagnostics()
    assert "server 'demo'" in text
    assert "exit 3" in text
    assert "boom" in text


def test_https_sink_with_harness_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path)
    with (
        NotificationSink(ssl_context=ca.server_context("sink", tmp_path)) as sink,
        requests.Session() as http,
    ):
        answer = http.post(f"{sink.url}/hook", json={"a": 1}, verify=str(ca.cert_file))
        delivery = sink.wait_for(timeout=5)
    assert answer.status_code == 200
    assert (delivery.method, delivery.path, delivery.json()) == ("POST", "/hook", {"a": 1})
    with pytest.raises(AssertionError):
        sink.wait_for(lambda d: d.path == "/never", timeout=0.1)
