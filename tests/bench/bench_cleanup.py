"""Deleting a model version's objects (issue 10), side by side with the tools people use:

    python -m tests.bench.bench_cleanup [--objects 100000] [--gcs-objects 10000]
                                        [--skip-s3] [--skip-gcs]

Each store gets two buckets with identical contents: `--objects` small objects under one
version's prefix. One bucket is emptied by ours, the other by the anchor, so neither arm
runs in a bucket the other has already thinned.

MinIO (the tests/servers harness starts it), 100,000 objects: ours is cleanup's
`plan_objects` + `apply_objects` through `S3ObjectStore(endpoint_url=...)` (ListObjectsV2
pages, then DeleteObjects of <= 1000 keys); the anchor `aws s3 rm --recursive` (awscli from
PyPI in its own venv, `<cache>/tools/awscli`, installed on first use; its defaults, 10
requests in flight, `--only-show-errors` so printing 100,000 lines costs it nothing).
Printed: wall time, HTTP requests by kind (ours counted by a botocore `before-send` hook;
both arms also by MinIO's own request counters), peak RSS. Goals: ⌈n/1000⌉ DeleteObjects
and nothing else but the list pages; our time <= 0.8x the anchor's.

fake-gcs-server, 10,000 objects: ours through `GcsObjectStore` (one DELETE per object with
`ifGenerationMatch`, its default 16 workers) vs a sequential google-cloud-storage loop
(`for blob in bucket.list_blobs(prefix=...): blob.delete()`). Measured, no goal.

Each arm runs in its own child process, so its peak RSS is its own. Our time is the
plan + apply step of a warm process (imports and the client first: the function reuses
both); the anchor's is the whole command, its start-up (`aws s3 ls`, one request) printed
beside it. Setup, 2 cores: 2 x 100,000 objects in about 2 minutes, uploaded as tar archives
that MinIO extracts into ordinary objects (its snowball auto-extract, ~1,800 objects/s;
PutObject from Python with 32 threads manages ~600/s, which would take 5-6 minutes).
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest import mock

from tests.bench import Goal

AWSCLI = "1.46.3"  # awscli on PyPI; its own botocore, apart from the project's boto3
OURS, ANCHOR = "cleanup-ours", "cleanup-anchor"  # one bucket each, identical contents
PREFIX = "models/bert/1/"  # the version deleted
MiB = 1 << 20


def _keys(n: int) -> Iterator[str]:
    for i in range(n):
        yield f"{PREFIX}shard-{i // 1000:03d}/part-{i:06d}.bin"


# --- children: one arm each ------------------------------------------------------------


def _s3_ours(bucket: str) -> dict[str, Any]:
    from modelhooks.adapters.object_store.s3 import S3ObjectStore
    from modelhooks.core.cleanup import Policy, apply_objects, check_prefix, plan_objects

    store = S3ObjectStore(endpoint_url=os.environ["BENCH_ENDPOINT"])
    counts: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def count(event_name: str, **_: Any) -> None:  # one call per HTTP request sent
        with lock:
            counts[event_name.rsplit(".", 1)[-1]] += 1

    store.client.meta.events.register("before-send.s3", count)
    store.client.head_bucket(Bucket=bucket)  # connect and sign once, outside the timing
    counts.clear()
    started = time.perf_counter()
    where, policy = check_prefix(PREFIX, "bench"), Policy("Delete")
    purge = plan_objects(store, bucket, where, policy, marker="_SUCCESS")
    planned = time.perf_counter()
    done = apply_objects(store, bucket, purge)
    finished = time.perf_counter()
    return {
        "seconds": finished - started,
        "plan_seconds": planned - started,
        "deleted": len(purge.deletions) - len(done.failed),
        "failed": len(done.failed) + len(purge.kept),
        "requests": dict(counts),
    }


class _CountingAdapter:
    """Wraps a requests Session's adapters so every request sent is counted by kind."""

    def __init__(self, session: Any) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        lock = threading.Lock()
        for adapter in session.adapters.values():
            send = adapter.send

            def counted(request: Any, *args: Any, _send: Any = send, **kwargs: Any) -> Any:
                path = request.path_url.split("?", 1)[0]
                kind = "list page" if path.endswith("/o") else f"{request.method} object"
                with lock:
                    self.counts[kind] += 1
                return _send(request, *args, **kwargs)

            adapter.send = counted


def _gcs_client() -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="modelhooks-bench",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": os.environ["BENCH_ENDPOINT"]},
    )


def _gcs(bucket: str, ours: bool) -> dict[str, Any]:
    from modelhooks.adapters.object_store.gcs import GcsObjectStore
    from modelhooks.core.cleanup import Policy, apply_objects, check_prefix, plan_objects

    client = _gcs_client()
    client.get_bucket(bucket)  # connect once, outside the timing
    counting = _CountingAdapter(client._http)
    started = planned = time.perf_counter()
    if ours:
        store = GcsObjectStore(client)  # as bootstrap builds it: default workers and pool
        where, policy = check_prefix(PREFIX, "bench"), Policy("Delete")
        purge = plan_objects(store, bucket, where, policy, marker="_SUCCESS")
        planned = time.perf_counter()
        done = apply_objects(store, bucket, purge)
        deleted, failed = len(purge.deletions) - len(done.failed), len(done.failed)
    else:
        deleted, failed = 0, 0
        for blob in client.bucket(bucket).list_blobs(prefix=PREFIX):
            blob.delete()
            deleted += 1
    return {
        "seconds": time.perf_counter() - started,
        "plan_seconds": planned - started,
        "deleted": deleted,
        "failed": failed,
        "requests": dict(counting.counts),
    }


def _child(case: str, bucket: str) -> None:
    result = {
        "s3-ours": lambda: _s3_ours(bucket),
        "gcs-ours": lambda: _gcs(bucket, ours=True),
        "gcs-loop": lambda: _gcs(bucket, ours=False),
    }[case]()
    print(json.dumps(result))


# --- parent ----------------------------------------------------------------------------


# Linux starts a process's peak RSS (ru_maxrss) at its parent's when it execs, so a child of
# this fat parent could never report less than the parent's own. A small launcher forks
# the measured command instead: its floor is the launcher's ~6 MiB.
_LAUNCH = """\
import json, os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
report = {"wall": time.perf_counter() - start, "peak_rss_mib": usage.ru_maxrss / 1024}
with open(sys.argv[1], "w") as f:
    json.dump(report, f)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _timed(argv: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    """Run `argv` to its end: wall seconds, the peak RSS of that process, its stdout."""
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        report = Path(tmp) / "report.json"
        launch = [sys.executable, "-S", "-c", _LAUNCH, str(report), *argv]
        out = subprocess.run(launch, capture_output=True, text=True, env=dict(env), check=False)
        if out.returncode:
            raise SystemExit(f"{argv[0]} … failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
        measured: dict[str, Any] = json.loads(report.read_text())
    return measured | {"stdout": out.stdout}


def _arm(case: str, bucket: str, env: Mapping[str, str]) -> dict[str, Any]:
    argv = [sys.executable, "-m", "tests.bench.bench_cleanup", "--case", case, "--bucket", bucket]
    run = _timed(argv, env)
    result: dict[str, Any] = json.loads(run.pop("stdout").strip().splitlines()[-1])
    return result | run


def _awscli() -> tuple[Path | None, str]:
    """The aws CLI of its own venv under the cache, installed on first use; or None and why."""
    from tests.servers._cache import RecipeError, build_lock, cache_root, run

    venv = cache_root() / "tools" / "awscli"
    aws, stamp = venv / "bin" / "aws", venv / f".installed-awscli-{AWSCLI}"
    if stamp.exists():
        return aws, ""
    with build_lock():
        if not stamp.exists():
            try:
                run("awscli", [sys.executable, "-m", "venv", "--clear", str(venv)], quiet=True)
                pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
                run("awscli", [*pip, f"awscli=={AWSCLI}"], quiet=True)
                run("awscli", [str(aws), "--version"], quiet=True)
            except RecipeError as e:
                return None, e.diagnostics()
            stamp.touch()
    return aws, ""


def _minio_requests(url: str) -> collections.Counter[str]:
    """MinIO's own count of the S3 requests it served, by API (metrics v3: current at once,
    where v2's are cached for about 10 s)."""
    with urllib.request.urlopen(f"{url}/minio/metrics/v3/api/requests", timeout=10) as response:
        text = response.read().decode()
    counts: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        if line.startswith("minio_api_requests_total{"):
            api = line.split('name="', 1)[1].split('"', 1)[0]
            counts[api] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def _tarball(lo: int, hi: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i, key in enumerate(_keys(hi)):
            if i >= lo:
                data = f"object {i} of a model version\n".encode()
                info = tarfile.TarInfo(key)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _populate_minio(client: Any, n: int, workers: int) -> float:
    """Both buckets, 10,000 objects a tar archive, `workers` archives at a time."""
    started = time.perf_counter()
    parts = [(b, lo, min(lo + 10_000, n)) for b in (OURS, ANCHOR) for lo in range(0, n, 10_000)]

    def upload(part: tuple[str, int, int]) -> None:
        bucket, lo, hi = part
        client.put_object(
            Bucket=bucket,
            Key="upload.tar",
            Body=_tarball(lo, hi),
            Metadata={"snowball-auto-extract": "true"},  # MinIO stores each entry as an object
        )

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(upload, parts))
    return time.perf_counter() - started


def _count(client: Any, bucket: str) -> int:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sum(page.get("KeyCount", 0) for page in pages)


def _s3(n: int, workers: int) -> list[Goal]:
    from tests.servers.objectstores import start_minio
    from tests.servers.recipes import RECIPES

    if not RECIPES["minio"].installed():
        print("minio: not installed (python -m tests.servers install minio); skipped")
        return [Goal("cleanup S3 (minio not installed)", "-", "measured", False)]
    aws, why = _awscli()
    if aws is None:
        print(f"awscli {AWSCLI} could not be installed; only ours is measured:\n{why}")
    with tempfile.TemporaryDirectory(prefix="bench-cleanup-") as tmp:
        # MinIO's own request counters, readable without a token (the server's env only)
        with mock.patch.dict(os.environ, {"MINIO_PROMETHEUS_AUTH_TYPE": "public"}):
            info, processes = start_minio(Path(tmp))
        try:
            env = {
                **os.environ,
                "BENCH_ENDPOINT": info.endpoint_url,
                "AWS_ACCESS_KEY_ID": info.access_key,
                "AWS_SECRET_ACCESS_KEY": info.secret_key,
                "AWS_DEFAULT_REGION": info.region,
                # no developer's ~/.aws settings (e.g. max_concurrent_requests) in either arm
                "AWS_CONFIG_FILE": str(Path(tmp) / "no-aws-config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(Path(tmp) / "no-aws-credentials"),
            }
            with info.s3_client() as client:
                for bucket in (OURS, ANCHOR):
                    client.create_bucket(Bucket=bucket)
                setup = _populate_minio(client, n, workers)
                assert _count(client, OURS) == _count(client, ANCHOR) == n
                print(
                    f"setup: 2 x {n:,} objects in {setup:.0f} s "
                    f"({2 * n / setup:,.0f}/s; tar archives MinIO extracts, {workers} at a time)",
                    flush=True,
                )
                before = _minio_requests(info.endpoint_url)
                ours = _arm("s3-ours", OURS, env)
                served = _minio_requests(info.endpoint_url) - before
                assert ours["deleted"] == n and not ours["failed"], ours
                assert _count(client, OURS) == 0 and _count(client, ANCHOR) == n
                anchor, anchor_served, startup = None, collections.Counter[str](), 0.0
                if aws is not None:
                    endpoint = ["--endpoint-url", info.endpoint_url]
                    ls = [str(aws), "s3", "ls", f"s3://{ANCHOR}/", *endpoint]  # one request
                    startup = _timed(ls, env)["wall"]
                    before = _minio_requests(info.endpoint_url)
                    rm = [str(aws), "s3", "rm", "--recursive", f"s3://{ANCHOR}/{PREFIX}"]
                    anchor = _timed([*rm, *endpoint, "--only-show-errors"], env)
                    anchor_served = _minio_requests(info.endpoint_url) - before
                    assert _count(client, ANCHOR) == 0
        finally:
            for process in reversed(processes):
                process.stop()
    return _report_s3(n, ours, served, anchor, anchor_served, startup)


def _report_s3(
    n: int,
    ours: dict[str, Any],
    served: collections.Counter[str],
    anchor: dict[str, Any] | None,
    anchor_served: collections.Counter[str],
    startup: float,
) -> list[Goal]:
    sent = collections.Counter(ours["requests"])
    pages, deletes = sent["ListObjectsV2"], sent["DeleteObjects"]
    total, budget = sum(sent.values()), math.ceil(n / 1000)
    other = total - pages - deletes
    print(f"MinIO on loopback, {n:,} objects under one prefix (goal: <= 0.8x aws s3 rm)")
    print(
        f"  ours   plan+apply        {ours['seconds']:7.2f} s  {n / ours['seconds']:8,.0f} objects/s"
        f"  (plan {ours['plan_seconds']:.2f} s)  rss {ours['peak_rss_mib']:4.0f} MiB"
        f"  process {ours['wall']:.2f} s"
    )
    print(
        f"         requests sent: {pages} ListObjectsV2 pages + {deletes} DeleteObjects"
        f" + {other} other = {total}  (goal: {budget} DeleteObjects + the list pages);"
        f" MinIO served {served['ListObjectsV2']} list, "
        f"{served['DeleteMultipleObjects']} DeleteObjects, {served['DeleteObject']} DeleteObject"
    )
    served["HeadBucket"] -= 1  # the child's warm-up, before the timing
    seen = sum(served.values())  # MinIO's own count of what was sent
    goals = [
        Goal(
            f"cleanup S3: DeleteObjects ({n:,} objects)",
            f"{deletes}",
            f"= {budget}",
            deletes == budget,
        ),
        Goal(
            "cleanup S3: HTTP requests",
            f"{total}",
            f"= {budget} + {pages} list pages",
            deletes == budget and other == 0 and seen == total,
        ),
        Goal(
            "cleanup S3: peak RSS of plan+apply",
            f"{ours['peak_rss_mib']:.0f} MiB",
            "measured",
            True,
        ),
    ]
    if anchor is None:
        goals.append(Goal("cleanup S3: time / aws s3 rm (no awscli)", "-", "<= 0.8x", False))
        return goals
    ratio = ours["seconds"] / anchor["wall"]
    print(
        f"  anchor aws s3 rm         {anchor['wall']:7.2f} s  {n / anchor['wall']:8,.0f} objects/s"
        f"  (start-up {startup:.2f} s)   rss {anchor['peak_rss_mib']:4.0f} MiB"
    )
    print(
        f"         MinIO served {anchor_served['ListObjectsV2']} list, "
        f"{anchor_served['DeleteMultipleObjects']} DeleteObjects, "
        f"{anchor_served['DeleteObject']} DeleteObject"
    )
    print(
        f"  ours / aws s3 rm: {ratio:.3f}x the time ({_speed(ratio)}; "
        f"{(ours['seconds']) / (anchor['wall'] - startup):.3f}x without its start-up)"
    )
    goals.append(Goal("cleanup S3: time / aws s3 rm", f"{ratio:.3f}x", "<= 0.8x", ratio <= 0.8))
    return goals


def _populate_gcs(url: str, n: int, workers: int) -> float:
    import requests
    from requests.adapters import HTTPAdapter

    session = requests.Session()
    session.mount("http://", HTTPAdapter(pool_connections=1, pool_maxsize=workers))
    started = time.perf_counter()
    for bucket in (OURS, ANCHOR):
        params = {"project": "bench"}
        session.post(f"{url}/storage/v1/b", params=params, json={"name": bucket}).raise_for_status()

    def upload(where: tuple[str, str]) -> None:
        bucket, key = where
        session.post(
            f"{url}/upload/storage/v1/b/{bucket}/o",
            params={"uploadType": "media", "name": key},
            data=f"object {key}\n".encode(),
            headers={"Content-Type": "application/octet-stream"},
        ).raise_for_status()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(upload, [(b, k) for b in (OURS, ANCHOR) for k in _keys(n)]))
    return time.perf_counter() - started


def _speed(ratio: float) -> str:
    return f"{1 / ratio:.1f}x faster" if ratio <= 1 else f"{ratio:.1f}x slower"


def _gcs_bench(n: int) -> list[Goal]:
    from tests.servers.objectstores import start_fake_gcs
    from tests.servers.recipes import RECIPES

    if not RECIPES["fake-gcs-server"].installed():
        print("fake-gcs-server: not installed (python -m tests.servers install); skipped")
        return [Goal("cleanup GCS (fake-gcs-server not installed)", "-", "measured", False)]
    with tempfile.TemporaryDirectory(prefix="bench-cleanup-gcs-") as tmp:
        info, processes = start_fake_gcs(Path(tmp))
        try:
            env = {**os.environ, "BENCH_ENDPOINT": info.url}
            setup = _populate_gcs(info.url, n, 16)
            print(f"setup: 2 x {n:,} objects in {setup:.0f} s", flush=True)
            ours = _arm("gcs-ours", OURS, env)
            loop = _arm("gcs-loop", ANCHOR, env)
        finally:
            for process in reversed(processes):
                process.stop()
    for arm in (ours, loop):
        assert arm["deleted"] == n and not arm["failed"], arm
    print(f"fake-gcs-server on loopback, {n:,} objects under one prefix (measured, no goal)")
    for name, arm in (("ours   plan+apply", ours), ("anchor sequential loop", loop)):
        sent = collections.Counter(arm["requests"])
        print(
            f"  {name:<24} {arm['seconds']:7.2f} s  {n / arm['seconds']:8,.0f} objects/s"
            f"  rss {arm['peak_rss_mib']:4.0f} MiB  requests: {sent['list page']} list pages"
            f" + {sent['DELETE object']} DELETEs"
            f" + {sum(sent.values()) - sent['list page'] - sent['DELETE object']} other"
        )
    ratio = ours["seconds"] / loop["seconds"]
    print(
        f"  ours / sequential loop: {ratio:.3f}x the time ({_speed(ratio)}; ours planned in "
        f"{ours['plan_seconds']:.2f} s: the rest is fake-gcs-server answering DELETEs)"
    )
    sent = collections.Counter(ours["requests"])
    return [
        Goal("cleanup GCS: time / a sequential loop", f"{ratio:.3f}x", "measured", True),
        Goal(f"cleanup GCS: requests ({n:,} objects)", f"{sum(sent.values())}", "measured", True),
    ]


def main(argv: list[str] | None = None) -> list[Goal]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=100_000, help="per bucket, on MinIO")
    parser.add_argument("--gcs-objects", type=int, default=10_000, help="per bucket")
    parser.add_argument("--upload-workers", type=int, default=4, help="MinIO setup archives")
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--skip-gcs", action="store_true")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--bucket", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        _child(args.case, args.bucket)
        return []
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"cpus: {os.cpu_count()}  load: {load}", flush=True)
    goals = []
    if not args.skip_s3:
        goals += _s3(args.objects, args.upload_workers)
    if not args.skip_gcs:
        goals += _gcs_bench(args.gcs_objects)
    print("load average at the end: " + "/".join(f"{x:.1f}" for x in os.getloadavg()))
    return goals


if __name__ == "__main__":
    goals = main(sys.argv[1:])
    for goal in goals:
        print(goal.line())
    sys.exit(0 if all(g.met for g in goals) else 1)
