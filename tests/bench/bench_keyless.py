"""Keyless signing on the harness's private Sigstore, side by side with a key signature of
the same model, in one run:

    python -m tests.bench.bench_keyless [--signatures 20] [--files 4] [--file-kib 256]

The stack (etcd, kube-apiserver, CT log, Rekor v2, TSA, Fulcio, TUF repository) is started
from nothing and its start-up time printed. Then a small model is signed `--signatures`
times with an EC key and as many times keylessly (a Fulcio certificate for a ServiceAccount
token, a Rekor v2 entry and a TSA timestamp each), alternating, each into its own copy of
the model so every signature is made (none is "already signed"). Printed: signatures per
second for each method and the median time keyless adds over a key signature.

Seen here: the first signature for a token ~3 s, the next ones ~1 s (median), nearly all
of it waiting on the servers' integration: Fulcio's certificate ~1.8 s (its CT log,
TesseraCT, answers the SCT once the entry is sequenced; made once per token and kept while
it is valid) and Rekor v2's entry ~1 s per signature (rekor-tiles answers once the entry is
in a checkpoint, `--checkpoint-interval=1s`); the client's own work is a few milliseconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from tests.bench import Goal


def _model(where: Path, files: int, size: int) -> Path:
    where.mkdir(parents=True)
    for i in range(files):
        (where / f"shard-{i}.bin").write_bytes(os.urandom(size))
    (where / "config.json").write_text('{"layers": 2}')
    return where


def run(sigstore: object, tmp: Path, signatures: int, files: int, size: int) -> list[Goal]:
    from modelhooks.adapters.object_store.local import LocalObjectStore
    from modelhooks.adapters.signing import KeySigner, sign_model
    from modelhooks.adapters.signing.keyless import SigstoreSigner, SigstoreTrust
    from modelhooks.core.ports import Signer
    from tests.servers.sigstore import Sigstore
    from tests.unit.signing_material import make_key

    assert isinstance(sigstore, Sigstore)
    source = _model(tmp / "source", files, size)
    store = LocalObjectStore(tmp)
    token = tmp / "token"
    token.write_text(sigstore.token("bench", "signer"))
    trust = SigstoreTrust.from_env(sigstore.env())
    (tmp / "keys").mkdir()
    signers: dict[str, Signer] = {
        "key": KeySigner.from_file(make_key(tmp / "keys").private),
        "keyless": SigstoreSigner(trust, token),
    }
    for name, signer in signers.items():  # warm-up: imports, TUF refresh, connections
        shutil.copytree(source, tmp / "models" / f"warm-{name}")
        sign_model(store, "models", f"warm-{name}", signer)
    times: dict[str, list[float]] = {name: [] for name in signers}
    for i in range(signatures):
        for name, signer in signers.items():  # alternating: the same load on both
            shutil.copytree(source, tmp / "models" / f"{name}-{i}")
            start = time.perf_counter()
            signed = sign_model(store, "models", f"{name}-{i}", signer)
            times[name].append(time.perf_counter() - start)
            assert signed.created
    model_kib = sum(p.stat().st_size for p in source.iterdir()) // 1024
    rate = {name: len(t) / sum(t) for name, t in times.items()}
    median = {name: statistics.median(t) for name, t in times.items()}
    added = median["keyless"] - median["key"]
    print(f"model: {files + 1} files, {model_kib} KiB; {signatures} signatures each")
    for name in signers:
        print(
            f"  {name:8} {rate[name]:8.2f} signatures/s   median {median[name] * 1000:7.1f} ms"
            f"   p90 {statistics.quantiles(times[name], n=10)[-1] * 1000:7.1f} ms"
        )
    print(f"  keyless adds {added * 1000:.0f} ms over a key signature (median)")
    return [
        Goal("keyless: signatures per second", f"{rate['keyless']:.2f}/s", "figure", True),
        Goal("key: signatures per second", f"{rate['key']:.2f}/s", "figure", True),
        Goal("keyless: time added over a key signature", f"{added * 1000:.0f} ms", "figure", True),
    ]


def main(argv: list[str]) -> list[Goal]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--signatures", type=int, default=20)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--file-kib", type=int, default=256)
    args = parser.parse_args(argv)
    from tests.servers.kube import start_kube
    from tests.servers.recipes import RECIPES
    from tests.servers.sigstore import NEEDS, start_sigstore

    missing = [r for r in ("etcd", "kube-apiserver", *NEEDS) if not RECIPES[r].installed()]
    if missing:
        print(f"{', '.join(missing)}: not installed (python -m tests.servers install); skipped")
        return [Goal("keyless (servers not installed)", "-", "measured", False)]
    with tempfile.TemporaryDirectory(prefix="bench-keyless-") as name:
        tmp = Path(name)
        (tmp / "kube").mkdir()
        (tmp / "sigstore").mkdir()
        processes: list[object] = []
        try:
            start = time.perf_counter()
            kube, started = start_kube(tmp / "kube")
            processes += started
            sigstore, started = start_sigstore(tmp / "sigstore", kube)
            processes += started
            up = time.perf_counter() - start
            print(f"private Sigstore (with its kube-apiserver issuer) ready in {up:.1f} s")
            goals = run(sigstore, tmp, args.signatures, args.files, args.file_kib * 1024)
            return [Goal("keyless: the stack's start-up", f"{up:.1f} s", "figure", True), *goals]
        finally:
            for process in reversed(processes):
                process.stop()  # type: ignore[attr-defined]


if __name__ == "__main__":
    import sys

    goals = main(sys.argv[1:])
    for goal in goals:
        print(goal.line())
    sys.exit(0 if all(g.met for g in goals) else 1)
