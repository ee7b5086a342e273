"""`modelhooks transfer`'s .dockerconfigjson (MODEL_SYNC_<SIDE>_OCI_CREDENTIALS_PATH) of the
wrong shape or with an `auth` that is not base64 of user:password: a configuration error
naming the setting and the file, never the credentials' bytes, never an internal error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.transfer.config import resolve
from modelhooks.core.errors import ConfigError
from tests.unit.test_transfer_config import BASE

SETTING = "MODEL_SYNC_DESTINATION_OCI_CREDENTIALS_PATH"


@pytest.mark.parametrize(
    ("auths", "reason"),
    [
        ({"quay.example": {"auth": "!!!notbase64"}}, "quay.example: auth is not base64"),
        ({"quay.example": {"auth": "/w=="}}, "quay.example: auth is not base64"),  # b"\xff"
        ({"quay.example": {"auth": 7}}, "quay.example: auth is not base64"),
        ([1], "is not a .dockerconfigjson: auths: not a mapping"),
        ({"quay.example": "robot:pw"}, "is not a .dockerconfigjson: auths: not a mapping"),
    ],
    ids=["not-base64", "not-utf8", "not-a-string", "a-list", "an-entry-not-a-mapping"],
)
def test_a_docker_config_of_the_wrong_shape_is_a_configuration_error(
    tmp_path: Path, auths: Any, reason: str
) -> None:
    """Each exited 70 (binascii.Error, UnicodeDecodeError quoting a byte, AttributeError)."""
    file = tmp_path / ".dockerconfigjson"
    file.write_text(json.dumps({"auths": auths}))
    with pytest.raises(ConfigError) as caught:
        resolve(["--destination-oci-credentials-path", str(file)], BASE)
    said = caught.value.message
    assert said.startswith(f"{SETTING}: {file}") and reason in said, said
    assert "0xff" not in said and "robot" not in said


def test_a_credential_file_of_random_bytes_is_a_configuration_error(tmp_path: Path) -> None:
    """A mounted Secret's key holding binary exited 70, the codec's error quoting a byte."""
    directory = tmp_path / "s3-creds"
    directory.mkdir()
    (directory / "AWS_ACCESS_KEY_ID").write_bytes(b"\xff\xfeAKIA-secret")
    env = {k: v for k, v in BASE.items() if "SOURCE_AWS_ACCESS_KEY_ID" not in k}
    with pytest.raises(ConfigError) as caught:
        resolve(["--source-s3-credentials-path", str(directory)], env)
    said = caught.value.message
    assert said == (
        f"MODEL_SYNC_SOURCE_S3_CREDENTIALS_PATH: {directory / 'AWS_ACCESS_KEY_ID'} is not UTF-8 text"
    )


def test_a_metadata_file_that_never_ends_is_read_bounded(tmp_path: Path) -> None:
    metadata = tmp_path / "metadata"
    metadata.mkdir()
    with (metadata / "model.description").open("wb") as f:  # sparse: no disk
        f.truncate(2 << 20)
    with pytest.raises(ConfigError, match="is over 1048576 bytes"):
        resolve(["--metadata-configmap-path", str(metadata)], BASE)
