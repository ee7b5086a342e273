"""JSON Schemas of the canonical payloads, generated from the models in events/model.py.

`make docs` (tests/update_docs.py) rewrites the files; a unit test fails when
they are stale. Each file is what a CloudEvent's `dataschema` names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec.json

from modelhooks.events.model import END, EVENT_TYPES, SCHEMA_BASE, EventData

__all__ = ["DIRECTORY", "filename", "generate", "write"]

DIRECTORY = Path(__file__).resolve().parent


def filename(cls: type[EventData]) -> str:
    return f"{cls.TYPE}.v{cls.VERSION}.json"


# The models' patterns end with `$(?!\n)`: Python's re (msgspec's) also matches `$` before a
# final newline. JSON Schema's `$` (ECMA-262, no multiline) does not, so the schemas say `$`
# alone, which every validator compiles (RE2-based ones, e.g. Go's, refuse a lookahead).
_PY_END, _END = json.dumps(END)[1:-1], "$"


def generate() -> dict[str, dict[str, Any]]:
    """file name → schema, for every canonical type."""
    out = {}
    for cls in EVENT_TYPES.values():
        schema = json.loads(json.dumps(msgspec.json.schema(cls)).replace(_PY_END, _END))
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"{SCHEMA_BASE}/{filename(cls)}",
            **schema,
        }
        out[filename(cls)] = schema
    return out


def write(directory: Path = DIRECTORY) -> list[Path]:
    paths = []
    for name, schema in generate().items():
        path = directory / name
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        paths.append(path)
    return paths
