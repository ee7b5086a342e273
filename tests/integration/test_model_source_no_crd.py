"""`modelhooks watch-models` on a cluster that serves no Models (the CRD not applied yet, or
another cluster named): it goes on trying, as a watch does, and each WARNING says what is
missing and how to add it, not the Kubernetes client's exception with its HTTP headers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.servers._proc import Process
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))


def test_a_cluster_without_the_model_crd_is_told_to_install_it(
    own_kube_apiserver: tuple[KubeApiServer, list[Process]], tmp_path: Path
) -> None:
    kube, _ = own_kube_apiserver
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    argv = [MODELHOOKS, "watch-models", "--kubeconfig", str(config), "--to", "http://127.0.0.1:9/"]
    env: dict[str, Any] = {"PATH": "/usr/bin:/bin", "MODELHOOKS_HOME": str(tmp_path / "home")}
    with subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True) as proc:
        try:
            proc.wait(timeout=8)  # it keeps trying: the CRD may be applied after it starts
        except subprocess.TimeoutExpired:
            proc.terminate()
        err = proc.communicate(timeout=30)[1]
    warnings = [line for line in err.splitlines() if '"WARNING"' in line]
    assert warnings, err
    assert "no Models" in warnings[0] and "infra/k8s/crds/model.yaml" in warnings[0], err
    assert "HTTPHeaderDict" not in err and "Audit-Id" not in err, err
