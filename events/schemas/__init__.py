"""JSON Schemas of the canonical payloads, generated from the models in events/model.py.

`python -m events.schemas` (or `make schemas`) rewrites the files; a unit test fails when
they are stale. Each file is what a CloudEvent's `dataschema` names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec.json

from modelhooks.events.model import EVENT_TYPES, SCHEMA_BASE, EventData

__all__ = ["DIRECTORY", "filename", "generate", "write"]

DIRECTORY = Path(__file__).resolve().parent


def filename(cls: type[EventData]) -> str:
    return f"{cls.TYPE}.v{cls.VERSION}.json"


def generate() -> dict[str, dict[str, Any]]:
    """file name → schema, for every canonical type."""
    out = {}
    for cls in EVENT_TYPES.values():
        schema = msgspec.json.schema(cls)
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
