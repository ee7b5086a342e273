"""A YAML value PyYAML cannot construct (a date that is none, 2026-02-30; an integer of
more digits than Python converts, 4,300) is the file's mistake: a config error naming the
file (exit 2), not an internal error (exit 70, "a bug in modelhooks")."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelhooks.core.retention import Policies
from tests.unit.test_cli_mistakes import run

UNBUILDABLE = [
    "2026-02-30",  # no such day
    "2026-01-01 10:00:00 +99:00",  # no such offset
    "9" * 5000,  # past int()'s 4,300 digits
]


@pytest.mark.parametrize("value", UNBUILDABLE, ids=lambda v: v[:24])
def test_a_config_file_value_yaml_cannot_build_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"serve:\n  host: {value}\n")
    code, _, err = run(capsys, "settings", "--config", str(config))
    assert code == 2 and err.startswith("config_error: cannot read config file"), err
    assert str(config) in err


@pytest.mark.parametrize("value", UNBUILDABLE, ids=lambda v: v[:24])
def test_a_policy_file_value_yaml_cannot_build_names_the_file(value: str) -> None:
    with pytest.raises(ValueError, match=r"^prune\.yaml: not YAML"):
        Policies.from_yaml(f"policies: [{{repositories: 'r/*', keep: {value}}}]", "prune.yaml")


@pytest.mark.parametrize("value", ['"²"', '"' + "9" * 5000 + '"'], ids=["superscript", "long"])
def test_a_count_whose_text_is_no_number_names_the_key(value: str) -> None:
    with pytest.raises(ValueError, match=r"policies\[0\]: keep: a whole number"):
        Policies.from_yaml(f"policies: [{{repositories: 'r/*', keep: {value}}}]", "prune.yaml")


def test_a_count_as_text_still_reads() -> None:
    (rule,) = Policies.from_yaml("policies: [{repositories: 'r/*', keep: ' 3 '}]", "p").rules
    assert rule[1].keep == 3
