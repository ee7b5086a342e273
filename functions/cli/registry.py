"""`modelhooks registry list`: the model registry's models, versions and artifacts."""

from __future__ import annotations

import argparse
import json
from typing import Any

from modelhooks.cli import common

__all__ = ["SETTINGS", "add_parser"]

SETTINGS = frozenset({"home", "log_level", "registry"})


def add_parser(sub: Any, common_flags: argparse.ArgumentParser) -> None:
    reg = sub.add_parser("registry", help="inspect the model registry")
    reg_sub = reg.add_subparsers(dest="registry_command", required=True)
    ls = reg_sub.add_parser("list", parents=[common_flags], help="models, versions, artifacts")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modelhooks.bootstrap import model_registry
    from modelhooks.core.errors import ConfigError

    settings = common.settings(args)
    db = settings.home / "registry.db"
    if settings.registry.backend == "sqlite" and not db.is_file():
        raise ConfigError(
            f"no registry at {db.resolve()} (nothing registered there yet?); "
            "--home or MODELHOOKS_HOME names the state directory `modelhooks serve` uses"
        )
    registry = model_registry(settings)
    rows: list[dict[str, str]] = []
    for model in registry.list_models():
        row = {"model": model.name, "model_state": model.state.value}
        blank = dict.fromkeys(("version", "version_state", "uri", "digest", "artifact_state"), "")
        versions = registry.list_versions(model.id)
        if not versions:
            rows.append({**row, **blank})
        for version in versions:
            vrow = {**row, **blank, "version": version.name, "version_state": version.state.value}
            artifacts = registry.list_artifacts(version.id)
            if not artifacts:
                rows.append(vrow)
            for a in artifacts:
                rows.append(
                    {**vrow, "uri": a.uri, "digest": a.digest, "artifact_state": a.state.value}
                )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = ["model", "version", "model_state", "artifact_state", "digest", "uri"]
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in cols}
    print("  ".join(c.upper().ljust(widths[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols))
    return 0
