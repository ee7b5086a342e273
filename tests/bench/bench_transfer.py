"""transfer's streaming copy, side by side in one run:

    python -m tests.bench.bench_transfer [--size-mib 2048] [--files 4]

MinIO → OCI registry (distribution v3) and OCI → MinIO, each as
- raw:      the same bytes with the same clients and nothing else (S3 GETs piped into a
            chunked blob upload; ranged blob GETs piped into an S3 multipart upload)
- ours:     `transfer`'s copy (tar layers, sha256 of every file, resumable state)
- upstream: the async-upload job's approach on the same bytes: download everything to
            MODEL_SYNC_STORAGE_PATH, then upload it (disk = the model's size)
and a resumed copy: ours killed at 50 % of the bytes, then run again (goal: <= 0.6x a full
copy). Goals: ours >= 0.8x raw, peak disk <= 64 MB, peak RSS <= 256 MiB.

Every case runs in its own child process (its peak RSS and its disk writes are its own).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.bench import Goal

MiB = 1 << 20
CHUNK = 8 * MiB


def _disk_writes() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("write_bytes")).split()[1])


def _s3(endpoint: str, access: str, secret: str) -> Any:
    from modelhooks.adapters.object_store.s3 import S3ObjectStore

    return S3ObjectStore(
        endpoint_url=endpoint,
        region="us-east-1",
        credentials={"aws_access_key_id": access, "aws_secret_access_key": secret},
    )


def _oci(host: str, repo: str, tag: str, journal: Path | None = None) -> Any:
    from modelhooks.adapters.oci.clients import OciClients
    from modelhooks.adapters.transfer.oci import OciEnd

    client, r, ref = OciClients().for_uri(f"oci://{host}/{repo}:{tag}")
    return OciEnd(client, r, ref, host=host, fmt="image", journal=journal)


class _Progress:
    """Counts bytes; with `stop_at`, the process dies there (a killed Pod)."""

    def __init__(self, stop_at: int = 0) -> None:
        self.done, self.stop_at = 0, stop_at

    def start(self, total: int | None) -> None:
        pass

    def advance(self, n: int) -> None:
        self.done += n
        if self.stop_at and self.done >= self.stop_at:
            os._exit(9)


# --- cases (in a child process) -------------------------------------------------------------


def _ours(a: argparse.Namespace, stop_at: int = 0) -> int:
    from modelhooks.adapters.transfer.run import copy
    from modelhooks.adapters.transfer.stores import S3End

    store = _s3(a.endpoint, a.access, a.secret)
    journal = Path(a.state) / "oci.json"
    if a.case.startswith("ours-s3-to-oci") or a.case.startswith("resume-s3-to-oci"):
        dest = _oci(a.host, a.repo, "v1", journal)
        copied = copy(S3End(store, "bench", "model"), dest, _Progress(stop_at))
        dest.finish(copied.order)
    else:
        src = _oci(a.host, "bench/source", "v1")
        dest = S3End(store, a.bucket, "model", Path(a.state) / "s3.json")
        copied = copy(src, dest, _Progress(stop_at))
    return sum(size for size, _ in copied.files.values())


def _raw_s3_to_oci(a: argparse.Namespace) -> int:
    store = _s3(a.endpoint, a.access, a.secret)
    dest = _oci(a.host, a.repo, "v1")
    total = 0
    for obj in store.client.list_objects_v2(Bucket="bench", Prefix="model/")["Contents"]:
        body = store.client.get_object(Bucket="bench", Key=obj["Key"])["Body"]

        def chunks(body: Any = body) -> Iterator[bytes]:
            while data := body.read(CHUNK):
                yield data

        total += dest._upload(chunks())[1]
    return total


def _raw_oci_to_s3(a: argparse.Namespace) -> int:
    from modelhooks.adapters.transfer.oci import RangeReader

    store = _s3(a.endpoint, a.access, a.secret)
    src = _oci(a.host, "bench/source", "v1")
    manifest, _, _ = src.client.manifest(src.repo, src.ref)
    total = 0
    for n, layer in enumerate(manifest["layers"]):
        reader = RangeReader(src.client, src.repo, layer["digest"], int(layer["size"]))
        key = f"raw/{n}"
        upload = store.client.create_multipart_upload(Bucket=a.bucket, Key=key)["UploadId"]
        parts, number = [], 1
        while data := reader.read(CHUNK):
            etag = store.client.upload_part(
                Bucket=a.bucket, Key=key, UploadId=upload, PartNumber=number, Body=data
            )["ETag"]
            parts.append({"PartNumber": number, "ETag": etag})
            number += 1
            total += len(data)
        store.client.complete_multipart_upload(
            Bucket=a.bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
        )
    return total


def _upstream(a: argparse.Namespace) -> int:
    """Download to the storage path, then upload from it (what the upstream job does)."""
    from modelhooks.adapters.transfer.run import copy
    from modelhooks.adapters.transfer.stores import LocalEnd

    store = _s3(a.endpoint, a.access, a.secret)
    staging = Path(a.state) / "model"
    try:
        if a.case == "upstream-s3-to-oci":
            for obj in store.client.list_objects_v2(Bucket="bench", Prefix="model/")["Contents"]:
                target = staging / obj["Key"].removeprefix("model/")
                target.parent.mkdir(parents=True, exist_ok=True)
                store.client.download_file("bench", obj["Key"], str(target))
            dest = _oci(a.host, a.repo, "v1")
            copied = copy(LocalEnd(str(staging)), dest, _Progress())
            dest.finish(copied.order)
        else:
            copy(_oci(a.host, "bench/source", "v1"), LocalEnd(str(staging)), _Progress())
            for path in sorted(staging.rglob("*")):
                if path.is_file():
                    store.client.upload_file(str(path), a.bucket, f"up/{path.name}")
        return sum(p.stat().st_size for p in staging.rglob("*") if p.is_file())
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _child(a: argparse.Namespace) -> None:
    cases: dict[str, Callable[[], int]] = {
        "raw-s3-to-oci": lambda: _raw_s3_to_oci(a),
        "ours-s3-to-oci": lambda: _ours(a),
        "upstream-s3-to-oci": lambda: _upstream(a),
        "raw-oci-to-s3": lambda: _raw_oci_to_s3(a),
        "ours-oci-to-s3": lambda: _ours(a),
        "upstream-oci-to-s3": lambda: _upstream(a),
        "resume-s3-to-oci-kill": lambda: _ours(a, stop_at=int(a.stop_at)),
        "resume-s3-to-oci": lambda: _ours(a),
        "resume-oci-to-s3-kill": lambda: _ours(a, stop_at=int(a.stop_at)),
        "resume-oci-to-s3": lambda: _ours(a),
    }
    writes = _disk_writes()
    start = time.perf_counter()
    size = cases[a.case]()
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "seconds": seconds,
                "bytes": size,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "disk_write_mib": (_disk_writes() - writes) / MiB,
            }
        )
    )


# --- the parent ---------------------------------------------------------------------------


def _run(case: str, kw: dict[str, str], *, killed: bool = False) -> dict[str, float]:
    argv = [sys.executable, "-m", "tests.bench.bench_transfer", "--case", case]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", v]
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if killed:
        return {"seconds": time.perf_counter() - start, "code": out.returncode}
    if out.returncode:
        raise SystemExit(f"{case} failed:\n{out.stderr}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _row(name: str, r: dict[str, float], anchor: float | None = None) -> str:
    mbs = r["bytes"] / r["seconds"] / 1e6
    ratio = f"{mbs / anchor:5.2f}x raw" if anchor else ""
    return (
        f"  {name:<22} {mbs:7.0f} MB/s {r['seconds']:7.2f} s  rss {r['peak_rss_mib']:5.0f} MiB"
        f"  disk-writes {r['disk_write_mib']:7.1f} MiB  {ratio}"
    )


def _mbs(r: dict[str, float]) -> float:
    return r["bytes"] / r["seconds"] / 1e6


def main(argv: list[str] | None = None) -> list[Goal]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=2048)
    parser.add_argument("--files", type=int, default=4)
    for child in ("case", "endpoint", "access", "secret", "host", "repo", "bucket", "state",
                  "stop-at"):  # fmt: skip
        parser.add_argument(f"--{child}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        _child(args)
        return []
    from tests.servers.objectstores import start_minio
    from tests.servers.recipes import RECIPES
    from tests.servers.registries import start_distribution3

    for needed in ("minio", "distribution3"):
        if not RECIPES[needed].installed():
            print(f"{needed}: not installed (python -m tests.servers install {needed}); skipped")
            return [Goal(f"transfer ({needed} not installed)", "-", "measured", False)]
    work = Path(tempfile.mkdtemp(prefix="bench-transfer-"))
    processes: list[Any] = []
    for folder in ("minio", "registry"):
        (work / folder).mkdir()
    try:
        minio, ps = start_minio(work / "minio")
        processes += ps
        registry, ps = start_distribution3(work / "registry")
        processes += ps
        return _bench(args, work, minio, registry)
    finally:
        for p in processes:
            p.stop()
        shutil.rmtree(work, ignore_errors=True)


def _bench(args: argparse.Namespace, work: Path, minio: Any, registry: Any) -> list[Goal]:
    from modelhooks.adapters.transfer.run import copy
    from modelhooks.adapters.transfer.stores import LocalEnd, S3End

    store = _s3(minio.endpoint_url, minio.access_key, minio.secret_key)
    model = work / "model"
    model.mkdir()
    size = args.size_mib * MiB // args.files
    for n in range(args.files):
        with (model / f"shard-{n:02d}.bin").open("wb") as out:
            for _ in range(size // MiB):
                out.write(os.urandom(MiB))
    store.client.create_bucket(Bucket="bench")
    copy(LocalEnd(str(model)), S3End(store, "bench", "model"), _Progress())
    source = _oci(registry.host, "bench/source", "v1")
    source.finish(copy(LocalEnd(str(model)), source, _Progress()).order)
    shutil.rmtree(model)
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"cpus: {os.cpu_count()}  load: {load}  model: {args.files} files, {args.size_mib} MiB")

    def kw(case: str, **extra: str) -> dict[str, str]:
        bucket = f"out-{case}".replace("_", "-")[:60]
        store.client.create_bucket(Bucket=bucket)
        state = work / f"state-{case}"
        state.mkdir(exist_ok=True)
        return {
            "endpoint": minio.endpoint_url, "access": minio.access_key,
            "secret": minio.secret_key, "host": registry.host, "repo": f"bench/{case}",
            "bucket": bucket, "state": str(state), **extra,
        }  # fmt: skip

    results: dict[str, dict[str, float]] = {}
    for direction in ("s3-to-oci", "oci-to-s3"):
        for arm in ("raw", "ours", "upstream"):
            case = f"{arm}-{direction}"
            results[case] = _run(case, kw(case))
    total = args.size_mib * MiB
    resumed: dict[str, dict[str, float]] = {}
    for direction in ("s3-to-oci", "oci-to-s3"):
        args_ = kw(f"resume-{direction}", stop_at=str(total // 2))
        killed = _run(f"resume-{direction}-kill", args_, killed=True)
        assert killed["code"] == 9, killed
        args_.pop("stop_at")
        resumed[direction] = _run(f"resume-{direction}", args_)

    goals = []
    for direction in ("s3-to-oci", "oci-to-s3"):
        raw, ours, up = (results[f"{a}-{direction}"] for a in ("raw", "ours", "upstream"))
        print(f"{direction} ({total / 1e9:.2f} GB)")
        print(_row(f"raw-{direction}", raw))
        print(_row(f"ours-{direction}", ours, _mbs(raw)))
        print(_row(f"upstream-{direction}", up, _mbs(raw)))
        again = resumed[direction]
        share = again["seconds"] / ours["seconds"]
        print(
            f"  resumed after a kill at 50 %: {again['seconds']:.2f} s = {share:.2f}x of a full copy"
        )
        ratio = _mbs(ours) / _mbs(raw)
        disk = max(ours["disk_write_mib"], again["disk_write_mib"]) * MiB / 1e6
        rss = max(ours["peak_rss_mib"], again["peak_rss_mib"])
        goals += [
            Goal(f"transfer {direction} / raw copy", f"{ratio:.2f}x", ">= 0.8x", ratio >= 0.8),
            Goal(f"transfer {direction} peak disk", f"{disk:.1f} MB", "<= 64 MB", disk <= 64),
            Goal(f"transfer {direction} peak RSS", f"{rss:.0f} MiB", "<= 256 MiB", rss <= 256),
            Goal(f"transfer {direction} resumed at 50%", f"{share:.2f}x", "<= 0.6x", share <= 0.6),
        ]
    return goals


if __name__ == "__main__":
    goals = main()
    for goal in goals:
        print(goal.line())
    sys.exit(1 if any(not g.met for g in goals) else 0)
