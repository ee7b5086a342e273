"""`modelhooks watch-models --state FILE` when FILE cannot be written (the disk full: a real
process whose files may not grow, RLIMIT_FSIZE, as tests/unit/test_delivery_log_full_disk.py):
one ERROR line names the file, the Models are still delivered, the watch is not broken off
at every event, and a WARNING says when the file is written again."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_model_source import (  # noqa: F401 (fixtures)
    MODELHOOKS,
    Cluster,
    models,
    namespace,
    wait_until,
)
from tests.servers.kube import KubeApiServer
from tests.servers.sink import NotificationSink

pytestmark = pytest.mark.integration


def _full_disk() -> None:  # in the child, before exec: its files may not grow
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_a_state_file_that_cannot_be_written_is_one_error_and_the_watch_goes_on(
    kube_apiserver: KubeApiServer,
    models: Any,  # noqa: F811
    namespace: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    cluster = Cluster(models, namespace)
    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    state = tmp_path / "state.json"
    command = [MODELHOOKS, "watch-models", "--kubeconfig", str(kubeconfig), "--state", str(state)]
    command += ["--namespace", namespace, "--mode", "Reference"]
    lines: list[str] = []
    with NotificationSink() as sink:
        watcher = subprocess.Popen(
            [*command, "--to", sink.url, "--raw"],
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_full_disk,  # no threads in the child before exec
        )
        assert watcher.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(watcher.stderr or ()), daemon=True)
        reader.start()
        try:
            uids = []
            for name in ("m1", "m2", "m3"):
                uids.append(cluster.create(name)["metadata"]["uid"])
                sink.wait_for(lambda d, n=name: d.json()["name"] == n)
            assert watcher.poll() is None, "the watcher stopped"
            assert not state.exists()
            resource.prlimit(
                watcher.pid, resource.RLIMIT_FSIZE, resource.getrlimit(resource.RLIMIT_FSIZE)
            )  # room again
            uids.append(cluster.create("m4")["metadata"]["uid"])
            sink.wait_for(lambda d: d.json()["name"] == "m4")
            wait_until(
                "the state written again",
                lambda: state.exists() and set(json.loads(state.read_text())["sent"]) == set(uids),
            )
            wait_until("its WARNING", lambda: any("state written again" in line for line in lines))
        finally:
            watcher.kill()
            watcher.wait(timeout=10)
            reader.join(timeout=10)
            watcher.stderr.close()
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    errors = [line for line in logged if line["severity"] == "ERROR"]
    assert len(errors) == 1, lines  # not one per event
    assert str(state) in errors[0]["message"] and errors[0]["state_file"] == str(state)
    assert not [line for line in logged if "watch interrupted" in line["message"]], lines
    again = [line for line in logged if line["severity"] == "WARNING"]
    assert len(again) == 1 and "state written again" in again[0]["message"], lines
    assert not state.with_name("state.json.tmp").exists()
