"""Regenerate what the docs take from the code: README's settings table and the event
JSON Schemas (`make docs`). tests/unit/test_docs.py fails when either is stale."""

from __future__ import annotations

import re
from pathlib import Path

from modelhooks.cli.settings import settings_table
from modelhooks.events.schemas import write

README = Path(__file__).resolve().parents[1] / "README.md"
TABLE = re.compile(r"(<!-- settings-table:begin.*?-->\n).*?(<!-- settings-table:end -->)", re.S)


def main() -> None:
    text = README.read_text()
    README.write_text(TABLE.sub(lambda m: m.group(1) + settings_table() + "\n" + m.group(2), text))
    write()
    print(f"updated {README.name} and events/schemas/")


if __name__ == "__main__":
    main()
