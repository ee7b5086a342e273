"""`modelhooks sign` / `modelhooks verify` on a local model."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelhooks.cli import main
from tests.unit.signing_material import make_chain, make_key, write_model


def run(*argv: str | Path) -> int:
    return main([str(a) for a in argv])


def test_key_sign_verify_and_tamper(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, keys = write_model(tmp_path / "bert"), make_key(tmp_path)
    assert run("sign", model, "--key", keys.private, "--quiet") == 0
    out = capsys.readouterr().out
    assert "verdict: signed" in out and "root digest: sha256:" in out
    assert run("verify", model, "--public-key", keys.public, "--quiet") == 0
    assert "verdict: OK" in capsys.readouterr().out
    assert run("sign", model, "--key", keys.private, "--quiet") == 0
    assert "already signed" in capsys.readouterr().out
    (model / "config.json").write_text("{}")
    assert run("verify", model, "--public-key", keys.public, "--quiet") == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "config.json" in out


def test_certificate_blake3_and_external_signature(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, chain = write_model(tmp_path / "bert"), make_chain(tmp_path)
    (tmp_path / "sigs").mkdir()
    sig = tmp_path / "sigs" / "bert.sig"
    common = ["--signature", sig, "--hash", "blake3", "--quiet"]
    assert run("sign", model, "--key", chain.key, "--certificate", chain.leaf,
               "--certificate-chain", chain.intermediates, *common) == 0  # fmt: skip
    assert sig.exists() and not (model / "model.sig").exists()
    assert run("verify", model, "--certificate-chain", chain.root, *common) == 0
    other = make_chain(tmp_path, "other")
    assert run("verify", model, "--certificate-chain", other.root, *common) == 1
    assert "not valid" in capsys.readouterr().out


def test_the_settings_name_the_signature_marker_and_hash_where_no_flag_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment with its own ready marker, signature name and hash (layout.marker,
    signing.signature_name, signing.hash: what `sign` the function writes) is verified by
    `modelhooks verify` run with the same settings, no flags: it looked for model.sig,
    hashed the marker in (an 'extra file') and took sha256."""
    model, keys = write_model(tmp_path / "bert"), make_key(tmp_path)
    (model / "READY").write_text("")
    flags = ["--signature", "model.sig.json", "--ready-marker", "READY", "--hash", "blake3"]
    assert run("sign", model, "--key", keys.private, *flags, "--quiet") == 0
    monkeypatch.setenv("MODELHOOKS_LAYOUT_MARKER", "READY")
    monkeypatch.setenv("MODELHOOKS_SIGNING_SIGNATURE_NAME", "model.sig.json")
    monkeypatch.setenv("MODELHOOKS_SIGNING_HASH", "blake3")
    capsys.readouterr()
    assert run("verify", model, "--public-key", keys.public, "--quiet") == 0, capsys.readouterr()
    assert run("sign", model, "--key", keys.private, "--quiet") == 0  # the same signature
    assert "already signed (unchanged)" in capsys.readouterr().out
    assert not (model / "model.sig").exists()
    monkeypatch.setenv("MODELHOOKS_SIGNING_HASH", "sha256")  # a flag still wins
    assert run("verify", model, "--public-key", keys.public, "--hash", "blake3", "--quiet") == 0
