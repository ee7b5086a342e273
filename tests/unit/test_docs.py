"""The documentation promises that code keeps: README's settings table, event schemas."""

from __future__ import annotations

import json
import re
from pathlib import Path

from modelhooks.cli.settings import settings_table
from modelhooks.events.schemas import DIRECTORY, generate

ROOT = Path(__file__).resolve().parents[2]


def test_readme_settings_table_matches_the_settings_model() -> None:
    readme = (ROOT / "README.md").read_text()
    m = re.search(
        r"<!-- settings-table:begin.*?-->\n(.*?)<!-- settings-table:end -->", readme, re.S
    )
    assert m, "README.md lacks the settings-table markers"
    assert m.group(1).strip() == settings_table().strip(), (
        "README settings table is stale: run `make docs`"
    )


def test_readme_opens_with_the_two_commands() -> None:
    head = (ROOT / "README.md").read_text().splitlines()[:8]
    assert any(line.startswith("make run") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_event_schemas_are_fresh() -> None:
    expected = generate()
    on_disk = {p.name: json.loads(p.read_text()) for p in DIRECTORY.glob("*.json")}
    assert on_disk == expected, "events/schemas is stale: run `make docs`"


def test_event_schema_patterns_are_ones_every_json_schema_validator_compiles() -> None:
    """ECMA-262 patterns without lookarounds (RE2-based validators, e.g. Go's, refuse them):
    the models' `$(?!\\n)` (for Python's re) is `$` in the schemas, which ECMA reads alike."""

    def patterns(node: object) -> list[str]:
        if isinstance(node, dict):
            found = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
            return found + [p for v in node.values() for p in patterns(v)]
        return [p for v in node for p in patterns(v)] if isinstance(node, list) else []

    every = [p for schema in generate().values() for p in patterns(schema)]
    assert every and all(p.endswith("$") for p in every)
    assert [p for p in every if "(?=" in p or "(?!" in p or "(?<" in p] == []


def test_the_install_without_knative_is_generated_from_the_knative_services() -> None:
    from tests.tools import plain_kubernetes

    expected = plain_kubernetes.generate(plain_kubernetes.KNATIVE.read_text())
    assert plain_kubernetes.OUTPUT.read_text() == expected, (
        "infra/kubernetes/functions.yaml is stale: run `make docs`"
    )
