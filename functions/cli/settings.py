"""`modelhooks settings`: the effective settings (secrets redacted), or the table of all."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from modelhooks.cli import common
from modelhooks.core.settings import describe

__all__ = ["add_parser", "redact", "settings_table"]


def add_parser(sub: Any, common_flags: argparse.ArgumentParser) -> None:
    st = sub.add_parser("settings", parents=[common_flags], help="print the effective settings")
    st.add_argument("--markdown", action="store_true", help="the table of every setting")
    st.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.markdown:
        print(settings_table())
        return 0
    import msgspec

    doc = msgspec.to_builtins(common.settings(args), enc_hook=str)
    for spec in describe():
        if spec.secret:
            *sections, name = spec.path
            node = doc
            for section in sections:
                node = node[section]
            node[name] = redact(node[name])
    print(json.dumps(doc, indent=2))
    return 0


_LITERAL = re.compile(r"((?:^|[,:;=])(?:secret|token)=)(?!env:|file:)[^,;]+")


def redact(value: str) -> str:
    """A secret setting for display: env:/file: references stay, literal secrets go."""
    if not value or value == "none" or value.startswith(("env:", "file:")):
        return value
    if "=" not in value:
        return "<redacted>"
    return _LITERAL.sub(lambda m: m.group(1) + "<redacted>", value)


def settings_table() -> str:
    """The README's table of every setting."""
    rows = ["| setting | env var | flag | default | meaning |", "|---|---|---|---|---|"]
    for s in describe():
        default = "" if s.default in (None, "") else f"`{s.default}`"
        rows.append(f"| `{s.name}` | `{s.env}` | `{s.flag}` | {default} | {s.description} |")
    return "\n".join(rows)
