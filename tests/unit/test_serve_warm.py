"""`modelhooks serve` imports the libraries of its selected backends in the background once
it listens, so a burst of first deliveries does not queue behind their import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from modelhooks.bootstrap import build
from modelhooks.core.settings import load_settings


def test_the_app_names_the_extras_its_backends_select(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    plain = load_settings(env={"MODELHOOKS_HOME": str(tmp_path / "a")})
    assert build(plain).extras == frozenset()
    env = {
        "MODELHOOKS_HOME": str(tmp_path / "b"),
        "MODELHOOKS_REGISTRY_BACKEND": "kubernetes",
        "MODELHOOKS_REGISTRY_KUBECONFIG": str(kubeconfig),
    }
    assert build(load_settings(env=env)).extras == frozenset({"k8s"})


def test_warm_imports_them_in_the_background() -> None:
    script = textwrap.dedent(
        """
        import sys, threading
        from modelhooks.cli.serve import warm
        assert "kubernetes" not in sys.modules and "model_signing" not in sys.modules
        warm(frozenset({"k8s", "signing"}))
        for thread in threading.enumerate():
            if thread.name == "warm-imports":
                thread.join(60)
        print("kubernetes" in sys.modules, "model_signing" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True False"  # not signing's: verification's, if ever
