"""A secret given by reference (`env:NAME`, `file:PATH`) that gives nothing usable is a
configuration error at start-up naming the setting and the reference, never the secret:
not an internal error, not a token silently empty, not a read without end."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from modelhooks.cli import main
from modelhooks.core.errors import ConfigError
from modelhooks.events.auth import from_spec

SECRET = b"s3cr3t-Bytes"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\xff\xfe" + SECRET, "is not UTF-8 text"),  # was exit 70, the codec's error
        (b"", "is empty"),  # was taken: the registry asked with no token (exit 3)
        (b"\n \n", "is empty"),
    ],
    ids=["binary", "empty", "blank"],
)
def test_a_registry_token_file_that_gives_no_token_stops_the_command(
    home: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, reason: str
) -> None:
    token = home.parent / "token"
    token.write_bytes(content)
    monkeypatch.setenv("MODELHOOKS_REGISTRY_BACKEND", "kubeflow")
    monkeypatch.setenv("MODELHOOKS_REGISTRY_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("MODELHOOKS_REGISTRY_TOKEN", f"file:{token}")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["registry", "list"]) == 2, err.getvalue()
    said = err.getvalue()
    assert said.startswith(f"config_error: MODELHOOKS_REGISTRY_TOKEN=file:{token} {reason}")
    assert SECRET.decode() not in said and "0xff" not in said


def test_an_oci_password_variable_set_empty_is_refused(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelhooks.bootstrap import _oci
    from modelhooks.core.settings import load_settings

    monkeypatch.setenv("REGISTRY_PASSWORD", "")
    settings = load_settings(
        env={"MODELHOOKS_OCI_USERNAME": "ci", "MODELHOOKS_OCI_PASSWORD": "env:REGISTRY_PASSWORD"}
    )
    with pytest.raises(
        ConfigError, match=r"OCI_PASSWORD=env:REGISTRY_PASSWORD but \$REGISTRY_PASSWORD is empty"
    ):
        _oci(settings)


def test_an_hmac_key_of_random_bytes_is_a_configuration_error(tmp_path: Path) -> None:
    """`head -c 32 /dev/urandom > key`: serve exited 70 (UnicodeDecodeError)."""
    key = tmp_path / "key"
    key.write_bytes(b"\x8f\x00\xc3" + SECRET)
    with pytest.raises(ConfigError, match=f"file:{key} is not UTF-8 text") as caught:
        from_spec(f"hmac:secret=file:{key}", origin="MODELHOOKS_INGRESS_AUTH")
    assert SECRET.decode() not in caught.value.message


def test_a_secret_file_that_never_ends_is_read_bounded(tmp_path: Path) -> None:
    endless = tmp_path / "token"
    endless.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="is over 1048576 bytes: not a secret"):
        from_spec(f"bearer:token=file:{endless}", origin="MODELHOOKS_INGRESS_AUTH")
