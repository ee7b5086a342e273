"""`modelhooks registry list` / `modelhooks registry show NAME[/VERSION]`: the model
registry's models, versions, artifacts and signatures. `modelhooks registry export` /
`import FILE` move it between backends (modelhooks.core.registry_copy), e.g.:

    modelhooks registry export --registry-backend sqlite > registry.json
    modelhooks registry import registry.json --registry-backend kubernetes
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from modelhooks.cli import common
from modelhooks.core.errors import BadRequest, ConfigError, NotFound
from modelhooks.core.ports import ModelRegistry

__all__ = ["SETTINGS", "add_parser"]

SETTINGS = frozenset({"home", "log_level", "registry"})


def add_parser(sub: Any, common_flags: argparse.ArgumentParser) -> None:
    reg = sub.add_parser("registry", help="inspect the model registry")
    reg_sub = reg.add_subparsers(
        dest="registry_command", metavar="{list,show,export,import}", required=True
    )
    ls = reg_sub.add_parser(
        "list", parents=[common_flags], help="models, versions, artifacts, signers"
    )
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run)
    show = reg_sub.add_parser(
        "show", parents=[common_flags], help="one model (or version) in full, as JSON"
    )
    show.add_argument("name", metavar="NAME[/VERSION]")
    show.set_defaults(func=run_show)
    export = reg_sub.add_parser(
        "export", parents=[common_flags], help="every record as one JSON document"
    )
    export.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")
    export.set_defaults(func=run_export)
    load = reg_sub.add_parser(
        "import",
        parents=[common_flags],
        help="write an export into this registry (idempotent; old ids kept as properties)",
    )
    load.add_argument("file", type=Path, help="an export (- for stdin)")
    load.set_defaults(func=run_import)


def _registry(args: argparse.Namespace) -> ModelRegistry:
    from modelhooks.bootstrap import model_registry

    settings = common.settings(args)
    db = settings.home / "registry.db"
    if settings.registry.backend == "sqlite" and not db.is_file():
        raise ConfigError(
            f"no registry at {db.resolve()} (nothing registered there yet?); "
            "--home or MODELHOOKS_HOME names the state directory `modelhooks serve` uses"
        )
    return model_registry(settings)


def run_show(args: argparse.Namespace) -> int:
    registry = _registry(args)
    name, wanted = common.model_and_version(registry, args.name)
    model = registry.get_model(name)
    if model is None:
        raise NotFound(f"no model {args.name!r} in the registry")
    versions = [v for v in registry.list_versions(model.id) if not wanted or v.name == wanted]
    if wanted and not versions:
        raise NotFound(f"model {model.name!r} has no version {wanted!r}")
    doc = {
        **_plain(model),
        "versions": [
            {**_plain(v), "artifacts": [_plain(a) for a in registry.list_artifacts(v.id)]}
            for v in versions
        ],
    }
    print(json.dumps(doc, indent=2))
    return 0


def _plain(record: Any) -> dict[str, Any]:
    """A record as JSON: typed custom properties as their JSON values (0.95, not "0.95")."""
    from modelhooks.core.records import json_values

    doc = msgspec.structs.asdict(record)
    doc["custom_properties"] = json_values(record.custom_properties)
    return {k: (v.value if hasattr(v, "value") else v) for k, v in doc.items()}


def run(args: argparse.Namespace) -> int:
    """Rows stream as the registry yields them (page by page where it can): JSON as one
    array written row by row, the table with its columns sized by the first rows."""
    from modelhooks.core.registry_copy import walk

    rows = _rows(walk(_registry(args)))
    if args.json:
        sys.stdout.write("[")
        for n, row in enumerate(rows):
            sys.stdout.write(("," if n else "") + "\n  " + json.dumps(row))
            if n % 100 == 0:
                sys.stdout.flush()
        sys.stdout.write("\n]\n")
        return 0
    cols = ["model", "version", "version_state", "digest", "signed_by", "uri"]
    first = list(itertools.islice(rows, 100))
    widths = {c: max([len(c)] + [len(str(r[c])) for r in first]) for c in cols}
    print("  ".join(c.upper().ljust(widths[c]) for c in cols))
    for n, r in enumerate(itertools.chain(first, rows)):
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols), flush=n % 100 == 0)
    return 0


def _rows(walked: Iterator[Any]) -> Iterator[dict[str, str]]:
    blank = dict.fromkeys(
        ("version", "version_state", "uri", "digest", "artifact_state", "signed_by"), ""
    )
    for model, version, artifacts in walked:
        row = {"model": model.name, "model_state": model.state.value, **blank}
        if version is None:
            yield row
            continue
        vrow = {
            **row,
            "version": version.name,
            "version_state": version.state.value,
            "signed_by": version.custom_properties.get("signature.signer", ""),
        }
        if not artifacts:
            yield vrow
        for a in artifacts:  # a transfer that knew no version signed the artifact
            signer = vrow["signed_by"] or a.custom_properties.get("signature.signer", "")
            yield {
                **vrow,
                "uri": a.uri,
                "digest": a.digest,
                "artifact_state": a.state.value,
                "signed_by": signer,
            }


def run_export(args: argparse.Namespace) -> int:
    from modelhooks.core.registry_copy import export_registry

    text = json.dumps(export_registry(_registry(args)), indent=2) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def run_import(args: argparse.Namespace) -> int:
    from modelhooks.bootstrap import model_registry
    from modelhooks.core.registry_copy import import_registry

    try:
        text = _export_text(args.file)
        doc = json.loads(text)
    except OSError as exc:
        raise BadRequest(f"{args.file}: {exc.strerror}") from None
    except (ValueError, RecursionError) as exc:  # '[' * 10**5 was an internal error (exit 70)
        raise BadRequest(f"{args.file}: not JSON ({exc})") from None
    report = import_registry(model_registry(common.settings(args)), doc)  # sqlite: created
    for refusal in report.refused:
        print(f"refused: {refusal}", file=sys.stderr)
    print(report.summary())
    return 2 if report.refused else 0  # refused input, as replay's refused events (1: verification)


MAX_EXPORT_BYTES = 1 << 30  # an export's (replay's limit of a stored file)


def _export_text(file: Path) -> str:
    """An export's text, read as at most MAX_EXPORT_BYTES: `registry import /dev/zero` (or
    `-` from it) was read without end; ValueError past it."""
    if str(file) == "-":
        text = sys.stdin.read(MAX_EXPORT_BYTES + 1)
    else:
        with file.open(encoding="utf-8") as f:
            text = f.read(MAX_EXPORT_BYTES + 1)
    if len(text) > MAX_EXPORT_BYTES:
        raise ValueError(f"over {MAX_EXPORT_BYTES} characters: not an export")
    return text
