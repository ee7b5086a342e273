"""``python -m tests.servers install [NAME...]`` obtains the servers; ``status`` lists the cache.

install tries every requested server, then prints each failure (server, exact command, its
error) and exits 1 if any server could not be had.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from tests.servers._cache import RecipeError, bin_dir, cache_root, log
from tests.servers.recipes import RECIPES, declared_unavailable


def _install(names: list[str]) -> int:
    failures: list[str] = []
    started = time.monotonic()
    blocked = declared_unavailable()
    for name in names:
        recipe = RECIPES[name]
        if name in blocked and not recipe.installed():
            log(f"{name}: UNAVAILABLE here (MODELHOOKS_TEST_UNAVAILABLE): {blocked[name]}")
            continue
        t0 = time.monotonic()
        try:
            if recipe.installed():
                log(f"{name}: cached ({recipe.binary()})")
                continue
            recipe.obtain()
            log(f"{name}: ready in {time.monotonic() - t0:.0f}s")
        except RecipeError as exc:
            failures.append(exc.diagnostics())
            log(f"{name}: FAILED")
        except OSError as exc:
            failures.append(f"server {name!r}: {exc}")
            log(f"{name}: FAILED")
    log(f"install finished in {time.monotonic() - started:.1f}s")
    if failures:
        print("\nThese test servers could not be obtained:\n", file=sys.stderr)
        for text in failures:
            print(text + "\n", file=sys.stderr)
        return 1
    return 0


def _status() -> int:
    print(f"cache: {cache_root()}")
    total = 0
    for name, recipe in RECIPES.items():
        state = "ok     " if recipe.installed() else "MISSING"
        where = recipe.binary() if recipe.installed() else getattr(recipe, "path", "-")
        print(f"  {state} {name:16} {recipe.version:38} {where}")
    if bin_dir().is_dir():
        total = sum(p.stat().st_size for p in bin_dir().iterdir() if p.is_file())
    print(f"binaries in cache: {total / 2**20:.0f} MiB")
    usage = shutil.disk_usage(cache_root()) if cache_root().exists() else None
    if usage:
        print(f"free disk: {usage.free / 2**30:.1f} GiB")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.servers")
    sub = parser.add_subparsers(dest="command", required=True)
    install = sub.add_parser("install", help="obtain (build/install) the test servers")
    install.add_argument("names", nargs="*", metavar="NAME", help=", ".join(RECIPES))
    sub.add_parser("status", help="list which servers are cached")
    args = parser.parse_args(argv)
    if args.command == "status":
        return _status()
    if unknown := [n for n in args.names if n not in RECIPES]:
        parser.error(f"unknown server(s) {unknown}; known: {', '.join(RECIPES)}")
    return _install(args.names or list(RECIPES))


if __name__ == "__main__":
    sys.exit(main())
