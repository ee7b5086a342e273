"""`make bench`: every benchmark, each printing its figures next to its anchor, then a
summary of every goal (MET or MISSED, next to its anchor and the load average over its
bench); exits 1 when a goal is missed."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

from tests.bench import (
    Goal,
    bench_admission,
    bench_chain,
    bench_cleanup,
    bench_cold_start,
    bench_image,
    bench_keyless,
    bench_kubeflow,
    bench_models,
    bench_node,
    bench_pods,
    bench_prune,
    bench_signing,
    bench_spine,
    bench_store_scan,
    bench_transfer,
)
from tests.bench import load as load_average


def measured(bench: Callable[[list[str]], list[Goal]]) -> list[Goal]:
    """`bench`'s goals, each with the machine's load average at the bench's start and end."""
    start = load_average()
    print(f"   (load average {start:.2f})", flush=True)
    goals = bench([])
    end = load_average()
    print(f"   (load average {start:.2f} → {end:.2f})", flush=True)
    return [dataclasses.replace(g, load=(start, end)) for g in goals]


def main() -> int:
    print("== spine: register vs a bare functions-framework function", flush=True)
    goals = measured(bench_spine.main)
    print("\n== the signing chain: shuffled, duplicated deliveries with deletions", flush=True)
    goals += measured(bench_chain.main)
    print("\n== cold start: each Cloud Run source folder vs a bare functions-framework function")
    goals += measured(bench_cold_start.main)
    print("\n== image: register's cold start in the container image vs ff hello in it")
    goals += measured(bench_image.main)
    print("\n== signing: streamed model-signing vs model_signing's own API", flush=True)
    goals += measured(bench_signing.main)
    print("\n== keyless: Sigstore signatures vs key signatures of the same model", flush=True)
    goals += measured(bench_keyless.main)
    print("\n== prune: 10,000 tags, bounded concurrency vs a sequential delete loop", flush=True)
    goals += measured(bench_prune.main)
    print("\n== cleanup: 100,000 objects vs aws s3 rm; 10,000 vs a GCS delete loop", flush=True)
    goals += measured(bench_cleanup.main)
    print(
        "\n== models: 200 Models to Ready through watch-models → serve on kube-apiserver",
        flush=True,
    )
    goals += measured(bench_models.main)
    print("\n== node: the harness's single-node Kubernetes, start-up and memory", flush=True)
    goals += measured(bench_node.main)
    print(
        "\n== kubeflow: register into model-registry v0.3.0 + PostgreSQL vs SQLite, and "
        "upstream's client (MODELHOOKS_BENCH_KUBEFLOW_PUSHES=10000: the issue's size)",
        flush=True,
    )
    goals += measured(bench_kubeflow.main)
    print("\n== pods: the functions as Pods on the node vs one modelhooks serve", flush=True)
    goals += measured(bench_pods.main)
    print(
        "\n== admission: AdmissionReviews at 200/s (hey), cached and uncached, next to the "
        "init container's model_signing verify of a 2 GB model",
        flush=True,
    )
    goals += measured(bench_admission.main)
    print(
        "\n== transfer: a 2 GiB model MinIO → OCI and back vs a raw copy and upstream's "
        "download-then-upload, and a copy resumed after a kill at 50 %",
        flush=True,
    )
    goals += measured(bench_transfer.main)
    print("\n== store scan: serve's local store watcher on 100,000 files, none changing")
    goals += measured(bench_store_scan.main)
    print("\n== goals")
    for goal in goals:
        print(goal.line())
    missed = [g for g in goals if not g.met]
    print(f"{len(goals) - len(missed)} met, {len(missed)} MISSED")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
