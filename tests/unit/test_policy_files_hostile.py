"""A policy file (`prune.policy_file`, `cleanup.policy_file`) that is no YAML: a
configuration error naming the variable and the file, at start-up, never an internal error."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from modelhooks.cli import main
from modelhooks.core.cleanup import Cleanup
from modelhooks.core.retention import Policies

NOT_YAML = {"syntax": "policies: [\n", "nested": "[" * 100_000}


@pytest.mark.parametrize("kind", sorted(NOT_YAML))
def test_prune_stops_naming_the_policy_file(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Both exited 70, 'a bug in modelhooks' (yaml's ParserError, RecursionError)."""
    policy = tmp_path / "policies.yaml"
    policy.write_text(NOT_YAML[kind])
    monkeypatch.setenv("MODELHOOKS_PRUNE_POLICY_FILE", str(policy))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["prune", "plan", "oci://127.0.0.1:1/m"])
    said = f"config_error: MODELHOOKS_PRUNE_POLICY_FILE={policy}: not YAML: "
    assert code == 2 and err.getvalue().startswith(said), err.getvalue()


@pytest.mark.parametrize("kind", sorted(NOT_YAML))
def test_either_policy_file_is_a_value_error_naming_it(kind: str) -> None:
    for parse in (Cleanup.from_yaml, Policies.from_yaml):
        with pytest.raises(ValueError, match=r"^p\.yaml: not YAML: "):
            parse(NOT_YAML[kind], "p.yaml")


@pytest.mark.parametrize(
    ("variable", "content", "said"),
    [
        ("MODELHOOKS_PRUNE_POLICY_FILE", "/dev/zero", "over 1048576 bytes: no policy file"),
        ("MODELHOOKS_CLEANUP_POLICY_FILE", "/dev/zero", "over 1048576 bytes: no policy file"),
        ("MODELHOOKS_PRUNE_POLICY_FILE", b"\xff\xfe policies", "not UTF-8 text"),
    ],
)
def test_a_policy_file_is_read_bounded(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, content: object,
    said: str,
) -> None:  # fmt: skip
    """`/dev/zero` (or a model's weights named by mistake) was read whole into memory at
    start-up, and a file that is no UTF-8 text exited 70: both are configuration errors
    naming the variable and the file."""
    if isinstance(content, bytes):
        policy = tmp_path / "policies.yaml"
        policy.write_bytes(content)
    else:
        policy = Path(str(content))
    monkeypatch.setenv(variable, str(policy))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["prune", "plan", "oci://127.0.0.1:1/m"])
    assert code == 2 and f"{variable}={policy}: {said}" in err.getvalue(), err.getvalue()
