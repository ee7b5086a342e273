"""Regenerate what the docs take from the code: README's settings table, the event JSON
Schemas and the install without Knative, infra/kubernetes/functions.yaml (`make docs`).
tests/unit/test_docs.py fails when one is stale."""

from __future__ import annotations

import re
from pathlib import Path

from modelhooks.cli.settings import settings_table
from modelhooks.events.schemas import write
from tests.tools import plain_kubernetes

README = Path(__file__).resolve().parents[1] / "README.md"
TABLE = re.compile(r"(<!-- settings-table:begin.*?-->\n).*?(<!-- settings-table:end -->)", re.S)


def main() -> None:
    text = README.read_text()
    README.write_text(TABLE.sub(lambda m: m.group(1) + settings_table() + "\n" + m.group(2), text))
    write()
    plain_kubernetes.main()
    print(f"updated {README.name} and events/schemas/")


if __name__ == "__main__":
    main()
