"""`modelhooks sign` keyless without `--identity-token`: the Sigstore instance's URLs (or a
trust config) choose the method, and the token is the signing setting's file, else the
pod's service-account token, each named when it cannot be used. No server is reached: the
token is refused before any request."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelhooks.adapters.signing.config import DEFAULT_TOKEN_PATH
from modelhooks.cli import main

CLOSED = "http://127.0.0.1:9"  # discard port: nothing listens


@pytest.fixture
def model(tmp_path: Path) -> Path:
    where = tmp_path / "model"
    where.mkdir()
    (where / "weights.bin").write_bytes(b"w" * 64)
    return where


@pytest.fixture
def instance(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TUF", "FULCIO", "REKOR"):
        monkeypatch.setenv(f"SIGSTORE_{name}_URL", CLOSED)


@pytest.mark.usefixtures("instance")
def test_the_instance_urls_choose_keyless_with_the_settings_token(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "absent-token"
    monkeypatch.setenv("MODELHOOKS_SIGNING_IDENTITY_TOKEN", str(token))
    assert main(["sign", str(model)]) == 3  # our own credential refused: transient, retried
    assert f"identity token {token}" in capsys.readouterr().err
    assert not (model / "model.sig").exists()


@pytest.mark.skipif(DEFAULT_TOKEN_PATH.exists(), reason="runs inside a pod")
@pytest.mark.usefixtures("instance")
def test_without_a_token_setting_the_pods_token_is_read(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sign", str(model)]) == 3
    assert f"identity token {DEFAULT_TOKEN_PATH}" in capsys.readouterr().err


def test_no_method_at_all_names_the_keyless_ways(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sign", str(model)]) == 2
    assert "SIGSTORE_TUF_URL" in capsys.readouterr().err
