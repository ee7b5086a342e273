"""Admission latency under load, next to what the init-container approach costs (issue 19):

    python -m tests.bench.bench_admission [--seconds 60] [--rate 200] [--model-gb 2]

`modelhooks serve` hosting only admission over HTTPS, its policies read from the harness's
kube-apiserver as the modelhooks-admission ServiceAccount (a VerificationPolicy trusting one
key), models in cue-labs' registry (a signed OCI referrer) and fake-gcs-server (model.sig and
its binding statement). AdmissionReviews of a Pod mounting the model are POSTed by `hey` (a
Go load generator, rate-limited: --rate per second for --seconds) to /admission/validate:

- cached: the same digest again and again (the verdict cache answers; the policies come
  from memory, kept by a list + watch of the apiserver);
- uncached OCI / uncached GCS: the cache off (admission.cache_size=0): every review resolves,
  fetches the manifest or lists the prefix, reads the signature (and binding) and verifies.

Printed: p50 / p99 and errors of each, in one run; then `model_signing verify` (upstream's
API) of a --model-gb model on this machine, which is what the init-container approach (MVO)
pays at every pod start. Goals (the issue's): cached p99 <= 10 ms, uncached p99 <= 150 ms,
0 errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.bench import Goal

NAMESPACE = "bench-admission"


def review(reference: str, *, kind: str = "image") -> bytes:
    volume: dict[str, Any] = {"name": "model", "image": {"reference": reference}}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "volumes": [volume]},
    }
    if kind == "isvc":
        pod = {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "bench", "namespace": NAMESPACE},
            "spec": {"predictor": {"model": {"storageUri": reference}}},
        }
    doc = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": pod["kind"]},
            "operation": "CREATE",
            "namespace": NAMESPACE,
            "name": "bench",
            "object": pod,
        },
    }
    return json.dumps(doc).encode()


@contextlib.contextmanager
def servers(work: Path) -> Iterator[dict[str, Any]]:
    from tests.servers.kube import start_kube
    from tests.servers.objectstores import start_fake_gcs
    from tests.servers.registries import start_ociregistry

    started: list[Any] = []
    for folder in ("kube", "oci", "gcs"):
        (work / folder).mkdir()
    try:
        kube, procs = start_kube(work / "kube")
        started += procs
        registry, procs = start_ociregistry(work / "oci")
        started += procs
        gcs, procs = start_fake_gcs(work / "gcs")
        started += procs
        yield {"kube": kube, "registry": registry, "gcs": gcs}
    finally:
        for process in reversed(started):
            process.stop()


def setup(env: dict[str, Any], work: Path) -> dict[str, str]:
    """The policy, a signed OCI model and a signed GCS model: their references."""
    from kubernetes import client

    from modelhooks.adapters.object_store.gcs import GcsObjectStore
    from modelhooks.adapters.oci.distribution import DistributionRegistry
    from modelhooks.adapters.signing import KeySigner, sign_model
    from modelhooks.adapters.signing.oci import sign_oci
    from tests.e2e.admission_helpers import apply_crds, create_policy, trusting
    from tests.integration.test_signing_oci import push_model
    from tests.unit.signing_material import make_key, upload, write_model

    kube, registry, gcs = env["kube"], env["registry"], env["gcs"]
    keys = make_key(work, "bench")
    apply_crds(kube)
    with kube.api_client() as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    create_policy(kube, NAMESPACE, "team", trusting(keys))
    signer = KeySigner.from_file(keys.private)
    oci = DistributionRegistry(registry.url)
    push_model(oci, "bench/bert", "v1", write_model(work / "model"))
    sign_oci(oci, "bench/bert", "v1", signer)
    _, digest, _ = oci.manifest("bench/bert", "v1")
    storage = gcs.storage_client()
    storage.create_bucket("bench-models")
    store = GcsObjectStore(storage)
    upload(store, "bench-models", work / "model", "bert/1")
    sign_model(store, "bench-models", "bert/1", signer)
    return {"oci": f"{registry.host}/bench/bert@{digest}", "gcs": "gs://bench-models/bert/1/"}


@contextlib.contextmanager
def admission(env: dict[str, Any], work: Path, cache: int) -> Iterator[str]:
    """`modelhooks serve` hosting admission with a verdict cache of `cache` entries."""
    from tests.e2e.admission_helpers import serve_admission

    gcs = env["gcs"]
    serve_env = {
        "MODELHOOKS_ADMISSION_CACHE_SIZE": str(cache),
        "MODELHOOKS_STORE_BACKEND": "cloud",
        "GOOGLE_CLOUD_PROJECT": gcs.project,
        "MODELHOOKS_LOG_LEVEL": "WARNING",
        **gcs.env,
    }
    with serve_admission(env["kube"], work, serve_env, name=f"serve-{cache}") as (url, _):
        yield url


def allowed(url: str, body: bytes, ca: Path) -> dict[str, Any]:
    import ssl

    request = urllib.request.Request(
        f"{url}/admission/validate", data=body, headers={"Content-Type": "application/json"}
    )
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(request, timeout=30, context=context) as resp:
        return dict(json.load(resp)["response"])


def load(url: str, body: bytes, seconds: float, rate: int, work: Path) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, errors) of `hey` POSTing `body` at `rate`/s for `seconds`."""
    from tests.servers.recipes import RECIPES

    RECIPES["hey"].obtain()
    path = work / f"review-{uuid.uuid4().hex[:6]}.json"
    path.write_bytes(body)
    workers = 10
    argv = [
        str(RECIPES["hey"].binary()),
        "-z", f"{seconds:g}s",
        "-c", str(workers),
        "-q", f"{rate / workers:g}",
        "-m", "POST",
        "-T", "application/json",
        "-D", str(path),
        f"{url}/admission/validate",
    ]  # fmt: skip
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    codes = dict(re.findall(r"\[(\d+)\]\s+(\d+) responses", out))
    errors = sum(int(n) for code, n in codes.items() if code != "200")
    failed = out.partition("Error distribution:")[2]
    errors += sum(int(n) for n in re.findall(r"^\s+\[(\d+)\]\s", failed, re.M))
    if errors:
        print(out[-2000:], file=sys.stderr)
    return _pct(out, "50%"), _pct(out, "99%"), errors


def _pct(out: str, pct: str) -> float:
    """A percentile of hey's summary (v0.1.5 prints `99%% in 0.0042 secs`)."""
    number = pct.rstrip("%")
    found = re.search(rf"^\s+{number}%%? in ([\d.]+) secs", out, re.M)
    value = float(found[1]) * 1000 if found else 0.0
    return value if value > 0 else float("nan")


def init_container(gb: float, work: Path) -> float:
    """Seconds `model_signing` (upstream's API) takes to verify a `gb` GB model here."""
    import model_signing

    from tests.unit.signing_material import make_key

    model = work / "big"
    model.mkdir()
    block = os.urandom(1 << 20)
    files = max(1, round(gb * 4))
    for i in range(files):
        with (model / f"weights-{i:03d}.bin").open("wb") as out:
            for _ in range(int(gb * 1024 / files)):
                out.write(block)
    keys = make_key(work, "init")
    hashing = model_signing.hashing.Config().set_ignored_paths(paths=["model.sig"])
    model_signing.signing.Config().use_elliptic_key_signer(
        private_key=keys.private
    ).set_hashing_config(hashing).sign(model, model / "model.sig")
    started = time.monotonic()
    model_signing.verifying.Config().use_elliptic_key_verifier(
        public_key=keys.public
    ).set_hashing_config(hashing).verify(model, model / "model.sig")
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> list[Goal]:
    parser = argparse.ArgumentParser(prog="bench_admission")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--model-gb", type=float, default=2.0)
    args = parser.parse_args(argv)
    results: dict[str, tuple[float, float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp, servers(Path(tmp)) as env:
        work = Path(tmp)
        refs = setup(env, work)
        ca = env["kube"].ca.cert_file
        cases = {
            "cached (OCI digest)": (1000, review(refs["oci"])),
            "uncached OCI": (0, review(refs["oci"])),
            "uncached GCS (binding + 1 listing)": (0, review(refs["gcs"], kind="isvc")),
        }
        for name, (cache, body) in cases.items():
            with admission(env, work, cache) as url:
                answer = allowed(url, body, ca)
                assert answer["allowed"], (name, answer)
                load(url, body, 3, args.rate, work)  # warm-up
                results[name] = load(url, body, args.seconds, args.rate, work)
        verify_s = init_container(args.model_gb, work)
    print(f"  {args.rate}/s for {args.seconds:g} s each (hey, 10 workers), one Pod's reviews:")
    for name, (p50, p99, errors) in results.items():
        print(f"    {name:38} p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   errors {errors}")
    print(
        f"  init container (MVO's approach): model_signing verify of a {args.model_gb:g} GB "
        f"model: {verify_s:.2f} s at every pod start"
    )
    cached = results["cached (OCI digest)"]
    uncached = [v for k, v in results.items() if k.startswith("uncached")]
    worst = max(p99 for _, p99, _ in uncached)
    return [
        Goal("admission cached p99", f"{cached[1]:.2f} ms", "<= 10 ms", cached[1] <= 10),
        Goal("admission uncached p99 (OCI, GCS)", f"{worst:.2f} ms", "<= 150 ms", worst <= 150),
        Goal(
            "admission errors",
            str(sum(e for _, _, e in results.values())),
            "0",
            all(e == 0 for _, _, e in results.values()),
        ),
    ]


if __name__ == "__main__":
    goals = main(sys.argv[1:])
    for goal in goals:
        print(goal.line())
    sys.exit(0 if all(g.met for g in goals) else 1)
