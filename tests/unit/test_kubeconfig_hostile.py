"""A kubeconfig that is no kubeconfig (`watch-models --kubeconfig`, and every setting naming
one): a configuration error saying why, without quoting the file (it holds tokens), never
an internal error."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from modelhooks.cli import main

TOKEN = "s3cr3t-t0ken"
NOT_KUBECONFIGS = {
    "syntax": (f"users:\n- name: u\n  user: {{token: {TOKEN}: x}}\n".encode(), "not YAML: "),
    "nested": (b"[" * 100_000, "not YAML: nested too deep"),
    "binary": (b"\xff\xfe" + TOKEN.encode(), "not UTF-8 text"),
    "a list": (b"[1]\n", "not a kubeconfig"),
    "its shape": (b"clusters: 5\ncontexts: [1]\ncurrent-context: a\n", "not a kubeconfig"),
}


@pytest.mark.parametrize("kind", sorted(NOT_KUBECONFIGS))
def test_watch_models_says_what_is_wrong_with_the_kubeconfig(
    home: Path, tmp_path: Path, kind: str
) -> None:
    """Each exited 70, 'a bug in modelhooks', the YAML parser's message quoting the line."""
    content, reason = NOT_KUBECONFIGS[kind]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_bytes(content)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(
            ["watch-models", "--kubeconfig", str(kubeconfig), "--to", "http://127.0.0.1:9/"]
        )
    said = err.getvalue()
    assert code == 2, said
    assert said.startswith(
        f"config_error: no usable Kubernetes configuration in {kubeconfig}: {reason}"
    )
    assert TOKEN not in said


def test_a_reader_error_names_no_content(tmp_path: Path) -> None:
    from modelhooks.adapters.kube_client import client_from

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_bytes(b"\0" * 10)
    with pytest.raises(ValueError, match=r"^not YAML: special characters are not allowed$"):
        client_from(str(kubeconfig))
