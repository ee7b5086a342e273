"""Pruning a repository of 10,000 tags, side by side with a sequential delete loop:

    python -m tests.bench.bench_prune [--tags 10000] [--keep 1000] [--workers 8]
                                      [--registry distribution3|ociregistry]

Two identical repositories are pushed to a real registry of the test harness (distribution
v3 by default: tag DELETE, storage on disk). On the first, `prune` plans (history: the tag
list pages and one manifest read per tag, for its digest and push time) and applies the plan
with bounded concurrency (each delete after a HEAD that checks the tag still names the
planned digest). On the second, the anchor: the same plan, deleted by a plain sequential
loop of tag DELETEs. Printed: planning time, HTTP requests by kind, deletes per second.

Goals (issue 11): requests <= deletes + list pages + the reads and HEADs it needs (one read
per tag to plan, one HEAD per delete to check); >= 200 deletes/s on loopback.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.bench import Goal


class CountingRegistry:
    """A DistributionRegistry whose requests are counted by kind."""

    def __init__(self, url: str, workers: int) -> None:
        from modelhooks.adapters.oci.distribution import DistributionRegistry

        self.client = DistributionRegistry(url, workers=workers)
        self.counts: collections.Counter[str] = collections.Counter()
        lock, send = threading.Lock(), self.client.request

        def counted(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
            kind = "tag list page" if "/tags/list" in path else f"{method} manifest"
            with lock:
                self.counts[kind] += 1
            return send(method, path, *args, **kwargs)

        self.client.request = counted  # type: ignore[method-assign]


def _populate(url: str, repo: str, tags: int, workers: int) -> None:
    from modelhooks.adapters.oci.distribution import (
        CREATED,
        EMPTY,
        OCI_MANIFEST,
        DistributionRegistry,
    )

    client = DistributionRegistry(url)
    config, layer = client.push_blob(repo, b"{}"), client.push_blob(repo, b"weights")
    start = datetime.now(UTC) - timedelta(days=60)

    def push(n: int) -> None:
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {**EMPTY, "digest": config},
            "layers": [{"mediaType": "application/octet-stream", "digest": layer, "size": 7}],
            "annotations": {CREATED: (start + timedelta(minutes=n)).isoformat()},
        }
        client.push_manifest(repo, f"v1.{n // 1000}.{n % 1000}", manifest)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(push, range(tags)))


def run(url: str, tags: int, keep: int, workers: int) -> list[Goal]:
    from modelhooks.core.retention import Policy, apply, plan

    policy = Policy(streams=("v*",), keep=keep)
    ours, anchor = "bench/prune-ours", "bench/prune-loop"
    started = time.perf_counter()
    for repo in (ours, anchor):
        _populate(url, repo, tags, workers)
    print(f"pushed 2 x {tags} tags in {time.perf_counter() - started:.1f} s", flush=True)

    counting = CountingRegistry(url, workers)
    started = time.perf_counter()
    history, untagged = counting.client.history(ours)
    planned = plan(history, policy, untagged=untagged, now=datetime.now(UTC))
    planning = time.perf_counter() - started
    started = time.perf_counter()
    done = apply(counting.client, ours, planned, workers=workers)
    applying = time.perf_counter() - started
    counts = collections.Counter(counting.counts)  # before the checks below list again
    deletes = len(done.deleted)
    assert deletes == tags - keep and not done.skipped, (deletes, done.skipped)
    assert sorted(counting.client.tags(ours)) == sorted(d.tag for d in planned.keep)

    loop = CountingRegistry(url, 1)
    same = plan(loop.client.history(anchor)[0], policy, now=datetime.now(UTC))
    loop.counts.clear()
    started = time.perf_counter()
    for decision in same.delete:
        loop.client.delete_tag(anchor, decision.tag)
    sequential = time.perf_counter() - started

    pages = counts["tag list page"]
    reads, heads = counts["GET manifest"], counts["HEAD manifest"]
    total = pages + reads + heads + counts["DELETE manifest"]
    budget = deletes + pages + tags + deletes  # deletes + pages + one read per tag + a HEAD each
    ours_rate, loop_rate = deletes / applying, len(same.delete) / sequential
    print(f"planning {tags} tags: {planning:.2f} s ({tags / planning:,.0f} tags/s)")
    print(
        f"requests: {pages} tag list pages, {reads} manifest reads, {heads} HEADs, "
        f"{counts['DELETE manifest']} DELETEs = {total} (budget {budget})"
    )
    print(
        f"apply {deletes} deletes, {workers} at a time: {applying:.2f} s = {ours_rate:,.0f}/s   "
        f"| anchor, sequential loop: {sequential:.2f} s = {loop_rate:,.0f}/s   "
        f"({ours_rate / loop_rate:.2f}x)"
    )
    return [
        Goal("prune: HTTP requests (10k tags)", f"{total}", f"<= {budget}", total <= budget),
        Goal("prune: deletes per second", f"{ours_rate:,.0f}/s", ">= 200/s", ours_rate >= 200),
        Goal(
            "prune: deletes vs a sequential loop",
            f"{ours_rate / loop_rate:.2f}x",
            "measured",
            True,
        ),
    ]


def main(argv: list[str]) -> list[Goal]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tags", type=int, default=10_000)
    parser.add_argument("--keep", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--registry", choices=["distribution3", "ociregistry"], default="distribution3"
    )
    args = parser.parse_args(argv)
    from tests.servers import registries
    from tests.servers.recipes import RECIPES

    if not RECIPES[args.registry].installed():
        print(f"{args.registry}: not installed (python -m tests.servers install); skipped")
        return [Goal(f"prune ({args.registry} not installed)", "-", "measured", False)]
    start = getattr(registries, f"start_{args.registry}")
    with tempfile.TemporaryDirectory(prefix="bench-prune-") as tmp:
        info, processes = start(Path(tmp))
        try:
            print(f"registry: {args.registry} at {info.url}", flush=True)
            return run(info.url, args.tags, args.keep, args.workers)
        finally:
            for process in reversed(processes):
                process.stop()


if __name__ == "__main__":
    goals = main(sys.argv[1:])
    for goal in goals:
        print(goal.line())
    sys.exit(0 if all(g.met for g in goals) else 1)
