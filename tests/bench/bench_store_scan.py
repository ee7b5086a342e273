"""serve's local store watcher on a large store: 25,000 model versions (100,000 files), every
one announced already; the share of a core its scans take while nothing changes (72 % in
one run before its waits stretched with the listing's time and the events were made for
new markers only; 17 % after)."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from modelhooks.adapters.object_store.watch import LocalStoreWatcher
from modelhooks.events.layout import ObjectLayout
from tests.bench import Goal


def lay(store: Path, versions: int) -> None:
    for n in range(versions):
        folder = store / "models" / "models" / f"m{n}" / "1"
        folder.mkdir(parents=True)
        for name in ("weights.bin", "config.json", "tokenizer.json", "_SUCCESS"):
            (folder / name).touch()


def run(versions: int, seconds: float) -> list[Goal]:
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as tmp:
        store = Path(tmp) / "store"
        lay(store, versions)
        announced: list[object] = []
        watcher = LocalStoreWatcher(store, ObjectLayout(), announced.append, 1.0)
        watcher.poll()  # the first scan announces them all
        cpu, wall = time.process_time(), time.monotonic()
        watcher.start()  # nothing changes from now on
        time.sleep(seconds)
        share = (time.process_time() - cpu) / (time.monotonic() - wall)
        watcher.stop()
    files = versions * 4
    print(f"{versions:,} versions ({files:,} files): a listing {watcher.scanned_in:.2f} s, ")
    print(f"scans take {share:.0%} of a core ({len(announced):,} announced, once)")
    return [
        Goal(
            f"store watcher, {files:,} files unchanged",
            f"{share:.0%} of a core",
            "<= 25 % of a core",
            share <= 0.25 and len(announced) == versions,
            anchor=f"a listing {watcher.scanned_in:.2f} s",
        )
    ]


def main(argv: list[str]) -> list[Goal]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--versions", type=int, default=25_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    return run(args.versions, args.seconds)


if __name__ == "__main__":
    for goal in main([]):
        print(goal.line())
