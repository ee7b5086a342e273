"""The signature's name and the ready marker are plain file names in a model's prefix
(events.layout.file_name_refusal): a configuration naming another place (`../x.sig`,
`/x.sig`, `a/b.sig`, `..`) is a config error naming the setting, at start-up, not a
signature written at `<prefix>/../x.sig` (a literal GCS key outside the version once read
as a path, a 400 from the local store and MinIO on every delivery, dead-lettered)."""

from __future__ import annotations

import pytest

from modelhooks.core.errors import ConfigError
from modelhooks.core.settings import load_settings
from tests.unit.test_cli_mistakes import run

NOT_FILE_NAMES = ["../escape.sig", "/etc/escape.sig", "sigs/model.sig", "..", ".", "a\0b"]


@pytest.mark.parametrize("name", NOT_FILE_NAMES, ids=repr)
@pytest.mark.parametrize(
    "variable", ["MODELHOOKS_SIGNING_SIGNATURE_NAME", "MODELHOOKS_LAYOUT_MARKER"]
)
def test_a_name_that_is_not_a_file_name_is_a_config_error_naming_it(
    variable: str, name: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env={variable: name})
    assert variable in str(err.value) and "plain file name" in str(err.value)


def test_the_cli_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "settings", "--signing-signature-name", "../escape.sig")
    assert code == 2 and "--signing-signature-name" in err and "plain file name" in err, err


@pytest.mark.parametrize("name", ["model.sig", "bert.sig", "..sig", "模型.sig", "a b"])
def test_file_names_are_taken(name: str) -> None:
    settings = load_settings(env={"MODELHOOKS_SIGNING_SIGNATURE_NAME": name})
    assert settings.signing.signature_name == name


@pytest.mark.parametrize(
    "env",
    [
        {"MODELHOOKS_SIGNING_SIGNATURE_NAME": "_SUCCESS"},  # the marker's default
        {"MODELHOOKS_LAYOUT_MARKER": "model.sig"},  # the signature's default
        {"MODELHOOKS_SIGNING_SIGNATURE_NAME": "READY", "MODELHOOKS_LAYOUT_MARKER": "READY"},
    ],
)
def test_a_signature_named_as_the_ready_marker_is_a_config_error_naming_both(
    env: dict[str, str],
) -> None:
    """Signing would write the signature over the ready marker: a push again, signed again."""
    with pytest.raises(ConfigError) as err:
        load_settings(env=env)
    text = str(err.value)
    assert "MODELHOOKS_SIGNING_SIGNATURE_NAME" in text and "MODELHOOKS_LAYOUT_MARKER" in text
    assert "same file" in text


def test_the_cli_refuses_a_signature_named_as_the_marker_naming_both_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(capsys, "settings", "--signing-signature-name", "READY",
                       "--layout-marker", "READY")  # fmt: skip
    assert code == 2 and "--signing-signature-name" in err and "--layout-marker" in err, err
