"""Lay out the `modelhooks` namespace as it installs, for tools that read source trees
(mypy, import-linter): real directories, one symbolic link per file, from the package-dir
mapping in pyproject.toml (functions/ → modelhooks, events/ → modelhooks.events).

    python -m tests.tools.namespace_tree build/namespace
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mapping() -> dict[str, Path]:
    """Package name → source folder, as pyproject.toml declares them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: ROOT / folder for name, folder in config["package-dir"].items()}


def build(target: Path) -> Path:
    """Recreate `target`/modelhooks/… and return `target`."""
    shutil.rmtree(target, ignore_errors=True)
    folders = mapping()
    for package, source in sorted(folders.items()):
        nested = {Path(*p.split(".")) for p in folders if p.startswith(package + ".")}
        for path in source.rglob("*.py*"):
            if path.suffix not in (".py", ".pyi", ".typed") or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(source)
            dest = target / Path(*package.split(".")) / rel
            if any(Path(*package.split("."), *rel.parts).is_relative_to(n) for n in nested):
                continue  # another mapping owns it
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.symlink_to(path)
    return target


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "build/namespace")))
