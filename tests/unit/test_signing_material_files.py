"""Key material named by `sign` / `verify` (and the signing settings) that is not key
material: refused with exit 2 naming the file, read bounded, the bytes never shown."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from modelhooks.cli import main
from tests.unit.signing_material import make_key, write_model

SECRET = b"pa55-Word"


def run(*argv: str | Path) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([str(a) for a in argv])
    return code, err.getvalue()


def test_a_password_file_of_random_bytes_is_a_configuration_error(tmp_path: Path) -> None:
    """It exited 70 (internal error) with the codec's error quoting a byte of it."""
    model, keys = write_model(tmp_path / "bert"), make_key(tmp_path)
    password = tmp_path / "password"
    password.write_bytes(b"\xff\x00" + SECRET)
    code, said = run("sign", model, "--key", keys.private, "--password-file", password)
    assert (code, said) == (2, f"config_error: --password-file={password}: not UTF-8 text\n")


@pytest.mark.parametrize("named", ["key", "password"])
def test_key_material_that_never_ends_is_read_bounded(tmp_path: Path, named: str) -> None:
    """`--key /dev/zero` (or a model's weights named by mistake) was read whole."""
    model, keys = write_model(tmp_path / "bert"), make_key(tmp_path)
    endless = tmp_path / "endless"
    endless.symlink_to("/dev/zero")
    key, password = (endless, None) if named == "key" else (keys.private, endless)
    argv = ["sign", model, "--key", key, *(["--password-file", password] if password else [])]
    code, said = run(*argv)
    assert code == 2 and "over 1048576 bytes: not key material" in said, said


def test_a_public_key_that_never_ends_is_read_bounded(tmp_path: Path) -> None:
    model = write_model(tmp_path / "bert")
    endless = tmp_path / "endless.pem"
    endless.symlink_to("/dev/zero")
    code, said = run("verify", model, "--public-key", endless)
    assert code == 2 and "over 1048576 bytes: not key material" in said, said
