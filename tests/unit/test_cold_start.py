"""A functions-framework target builds, and imports, only what its own function needs: a
Cloud Run cold start pays for no other function's adapters and no heavy SDK its first event
does not use (issue 22). Each target starts in a fresh interpreter, as functions-framework
starts it (FUNCTION_TARGET set, then the source imported). What a first GCS push imports is
tests/integration/test_cold_start_gcs.py's (none of google-cloud-storage's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from modelhooks.bootstrap import DEPS, _needs
from modelhooks.handlers import NAMES, load

ROOT = Path(__file__).resolve().parents[2]

# SDKs no target needs at start with the default settings (local store, SQLite registry,
# signing off, no cluster), and the HTTP and crypto stacks they bring
HEAVY = ("google.cloud.storage", "google.api_core", "google.auth", "google.protobuf", "grpc",
         "boto3", "botocore", "kubernetes", "sigstore", "model_signing", "pydantic",
         "cryptography", "requests", "urllib3")  # fmt: skip

# a module, and the dependencies whose building may import it
BUILT_BY: dict[str, set[str]] = {
    "modelhooks.adapters.signing.admission": {"model_verifier"},
    "modelhooks.adapters.signing.config": {"signer", "hash_options"},
    "modelhooks.adapters.signing.manifest": {"signer", "hash_options", "model_verifier"},
    "modelhooks.adapters.signing.binding": {"signer", "model_verifier"},
    "modelhooks.delivery.router": set(),  # serve's broker routes by Triggers, a target does not
    "modelhooks.adapters.oci.clients": {"oci", "model_verifier"},
    # the registries' credentials: not by the OCI clients unless oci.username names some;
    # cleanup's, prune's and transfer's handlers parse OCI addresses (oci.distribution's)
    # when an event first names one, not at start
    "modelhooks.adapters.oci.credentials": {"model_verifier"},
    "modelhooks.adapters.oci.distribution": {"model_verifier"},
    # admission's checks, signing's readers; prune's plans only when one is applied
    "concurrent.futures": {"model_verifier", "signer", "hash_options"},
    # the upstream translators: each when a delivery first needs it, never at start (the OCI
    # ones by admission's verifier: oci.distribution reads their untag placeholder)
    "modelhooks.events.sources.gcs": set(),
    "modelhooks.events.sources.s3": set(),
    "modelhooks.events.sources.kubernetes": set(),
    "modelhooks.events.sources.schedule": set(),
    "modelhooks.events.sources.artifact_registry": set(),
    "modelhooks.events.sources.oci_distribution": {"model_verifier"},
    "modelhooks.events.sources._oci": {"model_verifier"},
    # the ports' Protocols: type hints where a handler or the delivery names them
    "modelhooks.core.ports": {"signer", "hash_options", "model_verifier", "transfers"},
    # a push's content digest: only a function accepting pushes has them named (ingress)
    "modelhooks.core.content": {"content"},
    # a registry's client and its auth: when an event first names one, never at start
    "modelhooks.adapters.oci.artifact_registry": set(),
    "modelhooks.adapters.oci.auth": set(),
    "modelhooks.core.conditions": {"cluster"},  # notify's Model status, not the Cluster port's
    "modelhooks.adapters.kubernetes.policies": {"policies"},
    "modelhooks.adapters.kubernetes.cluster": {"cluster"},
    "modelhooks.adapters.kubernetes.secrets": {"secrets"},
    "modelhooks.core.verification": {"policies", "model_verifier", "verdicts"},
    "modelhooks.core.retention": {"retention"},
    "modelhooks.core.cleanup": {"cleanup"},
    # the private Sigstore trust: signing's, and admission's init containers' root when first asked
    "modelhooks.adapters.signing.trust": {"signer", "hash_options"},  # signing.config reads it
    # a Model's own Secret's clients: when a deletion names one (spec.source.secretRef)
    "modelhooks.adapters.credentials_from_secret": set(),
}


def started(target: str, home: Path, **settings: str) -> set[str]:
    """The modules imported once `target`'s process has loaded main.py and built (with
    `settings`: MODELHOOKS_* variables)."""
    return set(_at_start(target, home, "sorted(sys.modules)", **settings))


def _at_start(target: str, home: Path, expression: str, **settings: str) -> Any:
    """`expression` (JSON) in `target`'s process once it has loaded main.py and built."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    env |= {"FUNCTION_TARGET": target, "MODELHOOKS_HOME": str(home), **settings}
    env |= {"MODELHOOKS_LOG_LEVEL": "WARNING"}
    code = f"import dataclasses, json, sys, main; print(json.dumps({expression}))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def _printed(code: str) -> Any:
    """The JSON a fresh interpreter running `code` prints last."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


# What every target imports: its classes are made at every start, so none is a dataclass
# (making one generates and compiles its methods, ~0.5 ms each; a msgspec Struct ~20 us)
SHARED = ("modelhooks.main", "modelhooks.bootstrap", "modelhooks.core", "modelhooks.events",
          "modelhooks.delivery", "modelhooks.handlers")  # fmt: skip


@pytest.mark.parametrize("target", NAMES)
def test_the_shared_start_path_makes_no_dataclass(target: str, tmp_path: Path) -> None:
    made = _at_start(
        target,
        tmp_path,
        "sorted(f'{name}.{k}' for name, m in list(sys.modules.items())"
        f" if name.startswith({SHARED!r}) for k, v in vars(m).items()"
        " if isinstance(v, type) and v.__module__ == name and dataclasses.is_dataclass(v))",
    )
    assert made == []


@pytest.mark.parametrize("target", NAMES)
def test_a_target_imports_only_what_its_function_needs(target: str, tmp_path: Path) -> None:
    modules = started(target, tmp_path)
    assert f"modelhooks.handlers.{target}" in modules
    needs = _needs(load(target))  # what its handler names, and the content of its pushes
    assert needs <= set(DEPS)
    unneeded = {module for module, built_by in BUILT_BY.items() if not (built_by & needs)} | {
        f"modelhooks.handlers.{other}" for other in NAMES if other != target
    }
    assert sorted(unneeded & modules) == []
    heavy = {m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY)}
    assert sorted(heavy) == []


def test_signing_with_a_key_imports_no_sigstore_at_start(tmp_path: Path) -> None:
    """sign with a key loads the key at start (a bad one stops it) and nothing of the
    Sigstore methods, nor what only verification or certificates use."""
    from tests.unit.signing_material import make_key

    key = make_key(tmp_path).private
    modules = started("sign", tmp_path / "home", MODELHOOKS_SIGNING_KEY=str(key))
    assert "modelhooks.adapters.signing.keys" in modules  # the signer is built
    unneeded = ("modelhooks.adapters.signing.keyless", "modelhooks.adapters.signing.trust",
                "sigstore", "sigstore_models", "pydantic", "model_signing", "cryptography.x509")  # fmt: skip
    assert sorted(m for m in modules if m.startswith(unneeded)) == []


def test_signing_with_a_key_makes_no_dataclass(tmp_path: Path) -> None:
    """What sign with a key loads by its first signature (the signer and the hashing at
    start, the model's signing and binding on the first event) makes no dataclass: its value
    types are msgspec Structs (a dataclass costs ~0.75 ms of CPU to make, 9 of them were ~7
    ms of sign's cold start)."""
    code = (
        "import dataclasses, importlib, json, sys\n"
        "for name in ('config', 'keys', 'streaming', 'model', 'binding'):\n"
        "    importlib.import_module(f'modelhooks.adapters.signing.{name}')\n"
        "print(json.dumps(sorted(f'{name}.{k}' for name, m in list(sys.modules.items())"
        " if name.startswith('modelhooks.') for k, v in vars(m).items()"
        " if isinstance(v, type) and v.__module__ == name and dataclasses.is_dataclass(v))))"
    )
    assert _printed(code) == []


def test_prune_answers_a_gcs_push_without_listing_it(tmp_path: Path) -> None:
    """prune acts on OCI pushes only (Function.object_pushes): its target names no gs://
    push by its content, so its first such event lists nothing (before, a listing against a
    store that did not answer made it 503, redelivered) and imports no store client."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    env |= {"FUNCTION_TARGET": "prune", "MODELHOOKS_HOME": str(tmp_path)}
    env |= {"MODELHOOKS_LOG_LEVEL": "WARNING", "MODELHOOKS_STORE_BACKEND": "cloud"}
    env |= {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"}  # nothing answers there
    code = """if True:
        import json, sys, main
        from modelhooks.bootstrap import build
        from modelhooks.delivery.http import function_delivery
        from modelhooks.events import samples
        doc = samples.load("gcs-eventarc-finalized-marker")
        headers = {f"ce-{k}": str(v) for k, v in doc.items() if k != "data"}
        headers["content-type"] = "application/json"
        answer = function_delivery("prune", build().delivery)(
            "POST", "/", headers, json.dumps(doc["data"]).encode()
        )
        print(json.dumps([answer.status, sorted(sys.modules)]))
    """
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    status, modules = json.loads(out.stdout.splitlines()[-1])
    assert status == 204
    unneeded = ("modelhooks.core.content", "modelhooks.core.stores", "modelhooks.adapters.object_store", "urllib3")  # fmt: skip
    assert sorted(m for m in modules if m.startswith(unneeded)) == []


def test_sign_on_a_cloud_store_imports_no_local_store_nor_registry_credentials(
    tmp_path: Path,
) -> None:
    """sign's target on GCS with a key and no registry user: signing's tuning tells a local
    store by its module only once something made one, and the OCI clients take the
    credentials' module only with credentials (oci.username)."""
    from tests.unit.signing_material import make_key

    key = make_key(tmp_path).private
    modules = started(
        "sign",
        tmp_path / "home",
        MODELHOOKS_SIGNING_KEY=str(key),
        MODELHOOKS_STORE_BACKEND="cloud",
    )
    assert "modelhooks.adapters.signing.streaming" in modules  # signing is built
    unneeded = ("modelhooks.adapters.object_store.local", "mmap", "modelhooks.adapters.oci.credentials")  # fmt: skip
    assert sorted(m for m in modules if m in unneeded) == []
    with_user = started(
        "register",
        tmp_path / "home2",
        MODELHOOKS_OCI_USERNAME="bob",
        MODELHOOKS_OCI_PASSWORD="x",
        MODELHOOKS_OCI_CREDENTIAL_HOSTS="reg.example",
    )
    assert "modelhooks.adapters.oci.credentials" in with_user  # built at start, as before


def test_signing_still_tunes_a_local_store_as_local(tmp_path: Path) -> None:
    """The local store's workers (CPUs + 4) and a remote one's (4 x CPUs + 4), told apart
    without signing importing the local store's module."""
    from modelhooks.adapters.object_store.local import LocalObjectStore
    from modelhooks.adapters.signing.streaming import HashOptions, _cpus

    class Remote:  # any store that is not the local one (signing reads only through it)
        pass

    cpus = _cpus()
    assert HashOptions().tuned(LocalObjectStore(tmp_path)).workers == min(32, cpus + 4)
    assert HashOptions().tuned(Remote()).workers == min(32, 4 * cpus + 4)  # type: ignore[arg-type]
    assert HashOptions(workers=3).tuned(LocalObjectStore(tmp_path)).workers == 3


def test_a_command_line_start_loads_only_the_named_commands_module() -> None:
    """`modelhooks watch-models …` builds its own parser, not serve's (whose module brings
    the HTTP server) nor any other command's; and reads no installed metadata unless
    `--version` asks."""
    code = (
        "import json, sys\n"
        "from modelhooks.cli import build_parser\n"
        "build_parser(['watch-models', '--help'])\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = set(_printed(code))
    assert "modelhooks.cli.watch_models" in loaded
    others = {f"modelhooks.cli.{name}" for name in ("serve", "transfer", "prune", "sign")}
    assert not loaded & others
    assert "importlib.metadata" not in loaded


@pytest.mark.parametrize("target", NAMES)
def test_a_target_starts_without_opening_sqlite(target: str, tmp_path: Path) -> None:
    """functions-framework builds the target in gunicorn's master only to check it, then
    forks the worker, which builds its own: the embedded registry and the delivery log open
    their files when first used (before, the master opened both, ran their schemas and
    started their threads, ~2.5 ms of CPU, and imported sqlite3 ~1.5 ms)."""
    home = tmp_path / "home"
    sqlite, threads = _at_start(
        target,
        home,
        "[sorted(m for m in sys.modules if 'sqlite' in m and not m.startswith('modelhooks')),"
        " sorted(t.name for t in __import__('threading').enumerate())]",
    )
    assert sqlite == []
    assert threads == ["MainThread"]
    files = {p.name: p.stat().st_size for p in home.iterdir()}
    assert files in ({}, {"registry.db": 0})  # made empty where used (registry list finds it)


@pytest.mark.parametrize("name", ["registry.db", "deliveries.db"])
def test_a_home_holding_no_database_still_stops_start_up(name: str, tmp_path: Path) -> None:
    """What opening the file would refuse is checked without opening it: the revision fails
    at start-up, naming the file, instead of answering 503 to every delivery."""
    home = tmp_path / "home"
    home.mkdir()
    (home / name).write_bytes(b"not a database, but something else entirely")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    env |= {"FUNCTION_TARGET": "register", "MODELHOOKS_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, "-c", "import main"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode != 0
    assert f"{home / name}: not an SQLite database" in out.stderr
