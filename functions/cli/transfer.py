"""`modelhooks transfer`: copy a model between stores, streaming, then sign and register it.
A drop-in for Kubeflow Model Registry's async-upload job: the same MODEL_SYNC_* variables,
`--args`, credential files and metadata directory (args > env > credential files >
defaults); `modelhooks transfer --help` lists them all.

    MODEL_SYNC_SOURCE_TYPE=s3 MODEL_SYNC_SOURCE_AWS_BUCKET=models … modelhooks transfer
    modelhooks transfer --source-type uri --source-uri https://host/bert.tar.gz \\
        --destination-type oci --destination-oci-uri quay.io/org/bert:v1 \\
        --model-upload-intent create_model --metadata-configmap-path /etc/model-metadata

Where it registers: with MODEL_SYNC_REGISTRY_SERVER_ADDRESS (arg or env), that Kubeflow
Model Registry (MODEL_SYNC_REGISTRY_*, the drop-in's); without it, the modelhooks registry
every other command uses (--registry-backend sqlite|kubeflow|kubernetes and the other
--registry-* settings, MODELHOOKS_REGISTRY_*, the config file; default: the embedded SQLite
registry in --home / MODELHOOKS_HOME), said on stderr.

Progress: a bar in a terminal, JSON lines on stderr otherwise (a Job's log). The result
(ids, URI, digest, the registry's backend) is one JSON line on stdout and the termination
message.

Exit status: 0 done, 2 a missing or bad setting or bad input (nothing registered LIVE),
3 a store, registry or Sigstore service did not answer (run it again: it resumes),
4 the destination is claimed by another source (its `.transfer-claim` names it),
130 interrupted (the artifact is ABANDONED with the reason; a re-run resumes).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from modelhooks.cli import common, progress
from modelhooks.core.settings import Settings, load_settings

__all__ = ["SETTINGS", "add_parser"]

# its own table is MODEL_SYNC_* (the upstream job's); these choose the registry without one
SETTINGS: frozenset[str] = frozenset({"home", "registry"})


def add_parser(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    from modelhooks.adapters.transfer.config import add_arguments

    p = subparsers.add_parser(
        "transfer",
        parents=[parent],
        help="copy a model between stores, streaming; sign and register it (async-upload job)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modelhooks.adapters.transfer import resolve, transfer, write_termination_message
    from modelhooks.adapters.transfer.config import OPTIONS

    given = {o.name: getattr(args, o.name, None) for o in OPTIONS}
    cfg = resolve(given, os.environ)
    if cfg.get("registry_log_level"):
        logging.getLogger("modelhooks").setLevel(cfg.get("registry_log_level").upper())
    if cfg.sign_warning:
        print(f"warning: {cfg.sign_warning}", file=sys.stderr)
    # the modelhooks settings only when they choose the registry: a drop-in run never reads them
    registry = _registry(cfg, None if cfg.get("registry_server_address") else common.settings(args))
    signal.signal(signal.SIGTERM, _terminated)  # a deleted Job or evicted Pod: ABANDONED
    progress = Bar() if sys.stderr.isatty() else JsonProgress()
    with common.interruptible(
        lambda: f"{progress.so_far()}; the artifact is ABANDONED, a re-run resumes"
    ):
        ok = False
        try:
            result = transfer(cfg, progress, registry=registry)
            ok = True
        finally:
            # a copy that stopped ends its progress as failed, not finished: a Job's log
            # (and what reads its JSON lines) tells the two apart without the exit code
            if ok:
                progress.close()
            else:
                progress.fail()
    result["registry"] = registry.name
    write_termination_message(
        cfg.get("termination_message_path"),
        result,
        default=cfg.origins.get("termination_message_path") == "default",
    )
    print(json.dumps(result, sort_keys=True))
    return 0


def _terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("terminated (SIGTERM)")


def _registry(cfg: Any, settings: Settings | None = None) -> Any:
    """The registry to register in: the Kubeflow Model Registry of MODEL_SYNC_REGISTRY_*
    when a server address is given (the drop-in), else the one `settings` name (the
    composition root's, as every command's), said on stderr."""
    if cfg.get("registry_server_address"):
        return _kubeflow(cfg)
    from modelhooks.bootstrap import model_registry

    settings = settings or load_settings()
    backend = settings.registry.backend
    where = {
        "sqlite": f"at {settings.home / 'registry.db'}",
        "kubeflow": f"at {settings.registry.url}",
        "kubernetes": f"(shared namespace {settings.registry.namespace})",
    }[backend]
    print(
        f"transfer: registering in the {backend} registry {where} (no "
        "MODEL_SYNC_REGISTRY_SERVER_ADDRESS; --registry-backend or MODELHOOKS_REGISTRY_BACKEND "
        "chooses the registry)",
        file=sys.stderr,
    )
    return model_registry(settings)


def _kubeflow(cfg: Any) -> Any:
    """The Kubeflow Model Registry of MODEL_SYNC_REGISTRY_* (as upstream's client builds
    it: https when secure, the port appended unless the address has one)."""
    from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry

    address = cfg.get("registry_server_address")
    if "://" not in address:
        scheme = (
            "https" if cfg.get("registry_is_secure").lower() in ("true", "1", "yes") else "http"
        )
        address = f"{scheme}://{address}"
    host = address.split("://", 1)[1].split("/", 1)[0]
    if ":" not in host.rsplit("]", 1)[-1]:
        address = address.replace(host, f"{host}:{cfg.get('registry_port')}", 1)
    token = cfg.get("registry_user_token")
    if not token and cfg.get("registry_user_token_envvar"):
        token = os.environ.get(cfg.get("registry_user_token_envvar"), "")
    ca = cfg.get("registry_custom_ca")
    if not ca and cfg.get("registry_custom_ca_envvar"):
        ca = os.environ.get(cfg.get("registry_custom_ca_envvar"), "")
    if ca and "-----BEGIN" not in ca:  # a path, as upstream's
        ca = Path(ca).read_text()
    return KubeflowModelRegistry(address, token=token or None, ca=ca or None)


class Bar(progress.Bar):
    def __init__(self) -> None:
        super().__init__("transfer")

    def so_far(self) -> str:
        return f"transfer: {self._bar.n if self._bar else 0} bytes copied"

    def fail(self) -> None:
        self.close()


class JsonProgress:
    """One JSON line on stderr at most every `every` seconds, and one at the end."""

    def __init__(self, every: float = 2.0) -> None:
        self.done, self._every, self._last, self._t0 = 0, every, 0.0, time.monotonic()

    def start(self, total: int | None) -> None:
        self._emit("started")

    def advance(self, n: int) -> None:
        self.done += n
        if time.monotonic() - self._last >= self._every:
            self._emit("copying")

    def _emit(self, stage: str) -> None:
        self._last = time.monotonic()
        elapsed = self._last - self._t0
        line = {"progress": stage, "bytes": self.done, "seconds": round(elapsed, 1)}
        if elapsed > 0:
            line["bytes_per_second"] = int(self.done / elapsed)
        print(json.dumps(line), file=sys.stderr, flush=True)

    def close(self) -> None:
        self._emit("finished")

    def fail(self) -> None:
        self._emit("failed")

    def so_far(self) -> str:
        return f"transfer: {self.done} bytes copied"
