"""Signing throughput, side by side with its anchors, in one run:

    python -m tests.bench.bench_signing [--size-mib 2560] [--files 5] [--skip-minio]
        [--local-modes files,shards,blake3] [--rounds 5] [--skip-local] [--minio-rows big,many]
        [--minio-rounds 3]

Local (warm page cache, sha256): our streamed signing vs model_signing's own Python API on
the same files (goal: >= 0.95x its shard mode), plus blake3 (goal: >= 1.0x upstream's at
<= 128 MiB RSS). With MinIO installed (the tests/servers harness starts it): streaming sign
vs download-then-sign vs raw ranged GETs (goal: >= 0.9x raw GET; anchor 2, in the same
run: the same GETs each sha256-hashed by the client, what signing must do at least), a
many-file model
(--many-files files of 64 MiB in all: >= 0.5x the 5-file rate, <= 0.3 ms per file over the
bytes' time at that rate), peak RSS (goal <= 256 MiB) and bytes written to disk (goal: 0).
The many-file model is also read by its anchor, a GET of each object with the cheapest
client there is (http.client, a kept-alive connection per thread, URLs presigned before the
clock starts) at signing's concurrency (and as anchor 2 with each object sha256-hashed),
and signed with every read through botocore (as before direct reads): each prints its
time, its own CPU and MinIO's per file, which says what is ours and what is the server's.

Every measurement runs in its own child process, so peak RSS and disk writes are its own.
The model is generated in a temporary directory and deleted afterwards.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bench import Goal

MiB = 1 << 20


def _disk_writes() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("write_bytes")).split()[1])


def _process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of the process `pid` so far (0 without one)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def _measure(run: Callable[[], int], server_pid: int | None = None) -> dict[str, float]:
    writes = _disk_writes()
    server = _process_cpu(server_pid)
    cpu = time.process_time()
    start = time.perf_counter()
    size = run()
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "cpu_seconds": time.process_time() - cpu,
        "server_cpu_seconds": _process_cpu(server_pid) - server,
        "bytes": size,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "disk_write_mib": (_disk_writes() - writes) / MiB,
    }


def _model_size(model: Path) -> int:
    return sum(p.stat().st_size for p in model.rglob("*") if p.is_file() and p.name != "model.sig")


# --- cases (run in a child process) -------------------------------------------------------


def _upstream(model: Path, key: Path, mode: str) -> int:
    import model_signing
    from model_signing import hashing

    config = hashing.Config().set_ignored_paths(paths=["model.sig"])
    if mode == "shards":
        config = config.use_shard_serialization()
    elif mode == "blake3":
        config = config.use_file_serialization(hashing_algorithm="blake3")
    sig = model / "model.sig"
    sig.unlink(missing_ok=True)
    model_signing.signing.Config().use_elliptic_key_signer(private_key=key).set_hashing_config(
        config
    ).sign(model, sig)
    sig.unlink()
    return _model_size(model)


def _ours_local(model: Path, key: Path, mode: str) -> int:
    from modelhooks.adapters.signing import HashOptions, KeySigner, local_model, sign_model
    from modelhooks.adapters.signing.binding import binding_key

    options = {
        "files": HashOptions(),
        "shards": HashOptions(method="shards"),
        "blake3": HashOptions(hash_type="blake3"),
    }[mode]
    store, bucket, prefix = local_model(model)
    signed = sign_model(store, bucket, prefix, KeySigner.from_file(key), options=options)
    store.delete(bucket, signed.key)
    store.delete(bucket, binding_key(signed.key))  # upstream's next run would hash it
    return _model_size(model)


def _s3(endpoint: str, access: str, secret: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(max_pool_connections=32, s3={"addressing_style": "path"}),
    )


def _minio_stream(
    client: Any, bucket: str, key: Path, prefix: str, *, direct_reads: bool = True
) -> Callable[[], int]:
    """Signing the model under `prefix` (its size is listed before the clock starts)."""
    from modelhooks.adapters.object_store.s3 import S3ObjectStore
    from modelhooks.adapters.signing import KeySigner, sign_model
    from modelhooks.adapters.signing.binding import binding_key

    size = sum(i.size for i in S3ObjectStore(client).list(bucket, f"{prefix}/"))
    signer = KeySigner.from_file(key)

    def run() -> int:
        store = S3ObjectStore(client, direct_reads=direct_reads)
        signed = sign_model(store, bucket, prefix, signer, replace=True)
        store.delete(bucket, signed.key)
        store.delete(bucket, binding_key(signed.key))  # the next run would hash it
        return size

    return run


def _minio_raw_get(
    client: Any, bucket: str, chunk: int, parallel: int, *, sha256: bool = False
) -> int:
    """The 5-file model read by ranged GETs of `chunk` bytes, `parallel` at once; with
    `sha256`, each GET's body also hashed as it arrives, a MiB at a time (as signing
    does: hashlib releases the GIL, and a piece is hashed while it is in the cache)."""
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    listed = client.list_objects_v2(Bucket=bucket, Prefix="bench/")["Contents"]
    objects = [(o["Key"], o["Size"]) for o in listed]
    ranges = [(k, s, min(chunk, n - s)) for k, n in objects for s in range(0, n, chunk)]

    def get(r: tuple[str, int, int]) -> int:
        body = client.get_object(Bucket=bucket, Key=r[0], Range=f"bytes={r[1]}-{r[1] + r[2] - 1}")
        if not sha256:
            return len(body["Body"].read())
        digest, size = hashlib.sha256(), 0
        while data := body["Body"].read(MiB):
            digest.update(data)
            size += len(data)
        return size

    with ThreadPoolExecutor(parallel) as pool:
        return sum(pool.map(get, ranges))


def _presigned_gets(
    endpoint: str, access: str, secret: str, bucket: str, *, sha256: bool = False
) -> Callable[[], int]:
    """The many-file model's anchor: a GET of each of its objects with the cheapest client
    there is (http.client, one kept-alive connection per thread, URLs presigned with SigV4
    before the clock starts), as many at once as signing reads them; with `sha256`, each
    object also hashed."""
    import hashlib
    import http.client
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlsplit

    import boto3
    from botocore.config import Config

    from modelhooks.adapters.object_store.s3 import S3ObjectStore
    from modelhooks.adapters.signing import HashOptions

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    workers = HashOptions().tuned(S3ObjectStore(client)).workers or 1
    keys = [o.key for o in S3ObjectStore(client).list(bucket, "many/")]
    targets = []
    for key in keys:
        url = urlsplit(client.generate_presigned_url("get_object", {"Bucket": bucket, "Key": key}))
        targets.append(f"{url.path}?{url.query}")
    host = urlsplit(endpoint).netloc
    local = threading.local()

    def get(target: str) -> int:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection(host, timeout=60)
        conn.request("GET", target)
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {target}: {response.status} {data[:200]!r}")
        if sha256:
            hashlib.sha256(data).digest()
        return len(data)

    def run() -> int:
        with ThreadPoolExecutor(workers) as pool:
            return sum(pool.map(get, targets))

    return run


def _minio_download_then_sign(client: Any, bucket: str, key: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-dl-") as tmp:
        model = Path(tmp) / "bench"
        for o in client.list_objects_v2(Bucket=bucket, Prefix="bench/")["Contents"]:
            target = Path(tmp) / o["Key"]
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, o["Key"], str(target))
        return _upstream(model, key, "shards")


def _child(args: argparse.Namespace) -> None:
    # Imports are not what is measured: upstream's are made here, and so are ours (the
    # signing library's lazy names, the local store, blake3: ~40 ms in the clock before)
    import blake3  # noqa: F401
    import model_signing.signing  # noqa: F401

    import modelhooks.adapters.object_store.local
    import modelhooks.adapters.signing.binding
    import modelhooks.adapters.signing.keys
    import modelhooks.adapters.signing.local
    import modelhooks.adapters.signing.model
    import modelhooks.adapters.signing.streaming  # noqa: F401
    from modelhooks.adapters.signing import KeySigner

    key = Path(args.key)
    KeySigner.from_file(key).sign(b"{}")
    server = int(args.server_pid) if args.server_pid else None
    if args.case.startswith("minio-raw-get-many"):  # -sha256: anchor 2
        sha256 = args.case.endswith("-sha256")
        run = _presigned_gets(args.endpoint, args.access, args.secret, args.bucket, sha256=sha256)
    elif args.case.startswith("minio-stream"):  # -many: the many-file model; -botocore: as before
        client = _s3(args.endpoint, args.access, args.secret)
        prefix = "many" if "-many" in args.case else "bench"
        direct = not args.case.endswith("-botocore")
        run = _minio_stream(client, args.bucket, key, prefix, direct_reads=direct)
    elif args.case.startswith("minio-"):
        client = _s3(args.endpoint, args.access, args.secret)
        run = {
            # the anchor (the issue's): raw ranged GETs, 8 MiB each, CPUs + 4 in flight
            "minio-raw-get": lambda: _minio_raw_get(
                client, args.bucket, 8 * MiB, (os.cpu_count() or 1) + 4
            ),
            # anchor 2: the same GETs, each body sha256-hashed (what signing does at least)
            "minio-raw-get-sha256": lambda: _minio_raw_get(
                client, args.bucket, 8 * MiB, (os.cpu_count() or 1) + 4, sha256=True
            ),
            "minio-download-then-sign": lambda: _minio_download_then_sign(client, args.bucket, key),
        }[args.case]
    else:
        who, mode = args.case.split("-", 1)
        fn = _upstream if who == "upstream" else _ours_local
        model = Path(args.model)
        run = lambda: fn(model, key, mode)  # noqa: E731
    print(json.dumps(_measure(run, server)))


# --- parent ------------------------------------------------------------------------------


def _generate(model: Path, size_mib: int, files: int) -> None:
    """`files` files of `size_mib` in all (distinct content), plus a config.json."""
    model.mkdir(parents=True)
    per_file = size_mib * MiB // files
    block = os.urandom(min(16 * MiB, per_file))
    for i in range(files):
        with open(model / f"model-{i + 1:05d}-of-{files:05d}.safetensors", "wb") as f:
            left, j = per_file, 0
            while left > 0:
                part = (j.to_bytes(8, "little") + i.to_bytes(8, "little") + block[16:])[:left]
                f.write(part)
                left, j = left - len(part), j + 1
    (model / "config.json").write_text('{"architectures": ["Bench"]}')


def _run(case: str, **kw: str) -> dict[str, float]:
    argv = [sys.executable, "-m", "tests.bench.bench_signing", "--case", case]
    for k, v in kw.items():
        argv += [f"--{k}", v]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{case} failed:\n{out.stderr}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _row(name: str, r: dict[str, float], anchor: float | None = None, label: str = "") -> str:
    gbs = r["bytes"] / r["seconds"] / 1e9
    ratio = f"{gbs / anchor:5.2f}x {label}" if anchor else ""
    spread = f"({r['min_gbs']:.2f}-{r['max_gbs']:.2f})" if "min_gbs" in r else ""
    # the bytes per CPU-second (every thread's): what the work costs, whatever the load
    per_cpu = r["bytes"] / r["cpu_seconds"] / 1e9
    return (
        f"  {name:<26} {gbs:6.2f} GB/s {spread:13} {r['seconds']:6.2f} s  "
        f"{per_cpu:5.2f} GB/cpu-s  rss {r['peak_rss_mib']:5.0f} MiB  "
        f"disk-writes {r['disk_write_mib']:6.1f} MiB  {ratio}"
    )


def _gbs(r: dict[str, float]) -> float:
    return r["bytes"] / r["seconds"] / 1e9


def _median_of(
    cases: tuple[str, ...], kw: dict[str, str], rounds: int
) -> dict[str, dict[str, float]]:
    """Each case's median run of `rounds` (after a warm-up round), with the spread of its
    throughput (`min_gbs`, `max_gbs`); rounds interleaved so that a noisy neighbour slows
    every case alike rather than one of them."""
    runs: dict[str, list[dict[str, float]]] = {case: [] for case in cases}
    for rnd in range(rounds + 1):
        for case in cases:
            r = _run(case, **kw)
            if rnd:  # round 0 warms caches and the interpreter
                runs[case].append(r)
    out = {}
    for case, rs in runs.items():
        rs.sort(key=_gbs)
        median = dict(rs[len(rs) // 2])
        median["min_gbs"], median["max_gbs"] = _gbs(rs[0]), _gbs(rs[-1])
        out[case] = median
    return out


def _local(model: Path, key: Path, modes: list[str], rounds: int) -> list[Goal]:
    kw = {"model": str(model), "key": str(key)}
    cases = tuple(f"{who}-{mode}" for mode in modes for who in ("upstream", "ours"))
    results = _median_of(cases, kw, rounds=rounds)
    print(
        f"local model, {results[cases[0]]['bytes'] / 1e9:.2f} GB, warm page cache (median of "
        f"{rounds} after a warm-up, spread in brackets; each arm against the same mode)"
    )
    goals = []
    for mode in modes:
        ours, upstream = results[f"ours-{mode}"], results[f"upstream-{mode}"]
        anchor = _gbs(upstream)
        print(_row(f"upstream-{mode}", upstream))
        print(_row(f"ours-{mode}", ours, anchor, f"of upstream-{mode}"))
        ratio = _gbs(ours) / anchor
        if mode != "blake3":
            name = f"local signing / model_signing ({mode})"
            goals.append(Goal(name, f"{ratio:.2f}x", ">= 0.95x", ratio >= 0.95))
        else:  # upstream mmaps whole files (its RSS grows with the model); ours is bounded
            rss = ours["peak_rss_mib"]
            goals.append(
                Goal("local blake3 / model_signing", f"{ratio:.2f}x", ">= 1.0x", ratio >= 1.0)
            )
            goals.append(Goal("local blake3 peak RSS", f"{rss:.0f} MiB", "<= 128 MiB", rss <= 128))
    return goals


def _overhead(r: dict[str, float], count: int, rate: float) -> float:
    """The time beyond what its bytes take at `rate` (GB/s), in ms per file."""
    return (r["seconds"] - r["bytes"] / rate / 1e9) / count * 1e3


def _per_file(name: str, r: dict[str, float], count: int, rate: float) -> str:
    """Time, our CPU and MinIO's per file of the many-file model, and the time beyond what
    its bytes take at `rate` (the 5-file stream's)."""
    ms = 1e3 / count
    return (
        f"  {name:<42} {r['seconds'] * ms:5.2f} ms/file (over the bytes: "
        f"{_overhead(r, count, rate):5.2f})  cpu: ours {r['cpu_seconds'] * ms:5.2f}  "
        f"minio {r['server_cpu_seconds'] * ms:5.2f} ms/file"
    )


def _anchor2(ours: dict[str, float], raw: dict[str, float], hashed: dict[str, float]) -> str:
    """Our rate against anchor 2 (the raw GETs each sha256-hashed), and what the hashing
    costs the anchor: the part of the gap to raw GETs that is not ours."""
    return (
        f"  anchor 2: raw GETs + sha256 {_gbs(hashed):6.2f} GB/s = {_gbs(hashed) / _gbs(raw):.2f}x"
        f" of raw GETs; signing {_gbs(ours) / _gbs(hashed):.2f}x of anchor 2"
        f" (cpu per GB: ours {ours['cpu_seconds'] / ours['bytes'] * 1e9:.2f} s, anchor 2"
        f" {hashed['cpu_seconds'] / hashed['bytes'] * 1e9:.2f} s; minio"
        f" {ours['server_cpu_seconds'] / ours['bytes'] * 1e9:.2f} s,"
        f" {hashed['server_cpu_seconds'] / hashed['bytes'] * 1e9:.2f} s)"
    )


def _minio(
    model: Path, many: Path, key: Path, rows: tuple[str, ...] = ("big", "many"), rounds: int = 3
) -> list[Goal]:
    from tests.servers.objectstores import start_minio
    from tests.servers.recipes import RECIPES

    if not RECIPES["minio"].installed():
        print("minio: not installed (python -m tests.servers install minio); skipped")
        return [Goal("MinIO streaming (minio not installed)", "-", "measured", False)]
    with tempfile.TemporaryDirectory(prefix="bench-minio-") as tmp:
        info, processes = start_minio(Path(tmp))
        try:
            client = _s3(info.endpoint_url, info.access_key, info.secret_key)
            client.create_bucket(Bucket="bench")
            for path in sorted(model.iterdir()):
                client.upload_file(str(path), "bench", f"bench/{path.name}")
            for path in sorted(many.iterdir()):
                client.put_object(Bucket="bench", Key=f"many/{path.name}", Body=path.read_bytes())
            kw = {"endpoint": info.endpoint_url, "access": info.access_key,
                  "secret": info.secret_key, "bucket": "bench", "key": str(key),
                  "server-pid": str(processes[0].pid)}  # fmt: skip
            big = ("minio-raw-get", "minio-raw-get-sha256", "minio-download-then-sign")
            results = _median_of(("minio-stream", *(big if "big" in rows else ())), kw, rounds)
            many_cases = (
                "minio-raw-get-many",
                "minio-raw-get-many-sha256",
                "minio-stream-many-botocore",
                "minio-stream-many",
            )
            many_runs = _median_of(many_cases if "many" in rows else (), kw, rounds=rounds)
        finally:
            for p in processes:
                p.stop()
    stream = results["minio-stream"]
    goals = []
    if "big" in rows:
        anchor = _gbs(results["minio-raw-get"])
        print("MinIO on loopback (goals: stream >= 0.9x raw GET, rss <= 256 MiB, 0 disk writes)")
        for case, r in results.items():
            print(_row(case, r, anchor, "of raw GET"))
        dl = results["minio-download-then-sign"]
        print(
            f"  streaming sign vs download-then-sign: {dl['seconds'] / stream['seconds']:.2f}x "
            "faster"
        )
        print(_anchor2(stream, results["minio-raw-get"], results["minio-raw-get-sha256"]))
        ratio = _gbs(stream) / anchor
        goals.append(
            Goal("MinIO streaming sign / raw GET", f"{ratio:.2f}x", ">= 0.9x", ratio >= 0.9)
        )
    else:
        print(_row("minio-stream (5 files)", stream))
    if "many" not in rows:
        return goals
    count = sum(1 for _ in many.iterdir())
    print(
        f"MinIO, a model of {count} files, {_model_size(many) / MiB:.0f} MiB (median of {rounds})"
    )
    for name, case in (
        ("raw GETs (anchor: http.client, presigned)", "minio-raw-get-many"),
        ("anchor 2: raw GETs + sha256", "minio-raw-get-many-sha256"),
        ("sign, every read through botocore", "minio-stream-many-botocore"),
        ("sign (direct reads)", "minio-stream-many"),
    ):
        print(_per_file(name, many_runs[case], count, _gbs(stream)))
    many_files = many_runs["minio-stream-many"]
    raw_many, hashed_many = many_runs["minio-raw-get-many"], many_runs["minio-raw-get-many-sha256"]
    print(_anchor2(many_files, raw_many, hashed_many))
    print(_row(f"minio-stream, {count} files", many_files, _gbs(stream), "of 5-file stream"))
    many_ratio = _gbs(many_files) / _gbs(stream)
    # the time beyond what its bytes take at the 5-file rate, per file
    overhead = _overhead(many_files, count, _gbs(stream))
    rss = max(stream["peak_rss_mib"], many_files["peak_rss_mib"])
    written = max(stream["disk_write_mib"], many_files["disk_write_mib"])
    return [
        *goals,
        Goal(
            f"MinIO {count}-file model / 5-file rate",
            f"{many_ratio:.2f}x",
            ">= 0.5x",
            many_ratio >= 0.5,
        ),
        Goal(
            f"MinIO {count}-file model: overhead per file",
            f"{overhead:.2f} ms",
            "<= 0.3 ms",
            overhead <= 0.3,
        ),
        Goal(
            f"MinIO streaming peak RSS (incl. {count} files)",
            f"{rss:.0f} MiB",
            "<= 256 MiB",
            rss <= 256,
        ),
        Goal("MinIO streaming disk writes", f"{written:.1f} MiB", "0", written < 0.05),
    ]


def main(argv: list[str] | None = None) -> list[Goal]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=2560)
    parser.add_argument("--files", type=int, default=5)
    parser.add_argument("--many-files", type=int, default=1000, help="the many-file model")
    parser.add_argument("--skip-minio", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument(
        "--local-modes",
        default="files,shards,blake3",
        help="the local rows to measure (comma-separated: files, shards, blake3)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="local rounds (after a warm-up)")
    parser.add_argument(
        "--minio-rows",
        default="big,many",
        help="the MinIO rows (comma-separated: big = the 5-file model against raw ranged GETs, "
        "many = the many-file model against its anchors; its goals need the 5-file stream, "
        "always measured)",
    )
    parser.add_argument(
        "--minio-rounds", type=int, default=3, help="MinIO rounds (after a warm-up)"
    )
    for child_arg in (
        "case", "model", "key", "endpoint", "access", "secret", "bucket", "server-pid"
    ):  # fmt: skip
        parser.add_argument(f"--{child_arg}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        _child(args)
        return []
    from tests.unit.signing_material import make_key

    tmp = Path(tempfile.mkdtemp(prefix="bench-signing-"))
    try:
        keys = make_key(tmp)
        model, many = tmp / "bench", tmp / "many"
        _generate(model, args.size_mib, args.files)
        _generate(many, 64, args.many_files)
        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"cpus: {os.cpu_count()}  load: {load}  model: {args.files} files, {args.size_mib} MiB"
        )
        goals = []
        if not args.skip_local:
            goals += _local(model, keys.private, args.local_modes.split(","), args.rounds)
        if not args.skip_minio:
            rows = tuple(args.minio_rows.split(","))
            goals += _minio(model, many, keys.private, rows, args.minio_rounds)
        print("load average at the end: " + "/".join(f"{x:.1f}" for x in os.getloadavg()))
        return goals
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(0 if all(g.met for g in main()) else 1)
