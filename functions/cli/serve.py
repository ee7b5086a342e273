"""`modelhooks serve`: every function in one process, routed by the Trigger YAML."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from modelhooks.cli.common import check_port, interruptible
from modelhooks.cli.common import settings as load_args_settings
from modelhooks.core.errors import ModelhooksError
from modelhooks.core.settings import Settings
from modelhooks.delivery.encoding import Response
from modelhooks.delivery.http import Handler
from modelhooks.delivery.server import Limits

__all__ = ["add_parser"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", parents=[common], help="host every function in one process")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modelhooks.bootstrap import build
    from modelhooks.delivery.server import run as serve

    settings = load_args_settings(args)
    check_port(settings.serve.host, settings.serve.port)  # before the watcher acts on the state
    handler = build_handler(settings)  # a bad setting or trigger file stops start-up here
    store = (settings.home / "store").resolve()
    app = build(settings)
    signing = app.deps.signer

    def ready(host: str, port: int) -> None:
        status = _status(settings, signing.identity() if signing else None)
        print(_banner(host, port, store, settings) + status, file=sys.stderr, flush=True)
        warm(app.extras)

    with interruptible(lambda: "stopped serving"):
        serve(
            handler,
            host=settings.serve.host,
            port=settings.serve.port,
            limits=limits(settings),
            on_ready=ready,
            refuse=admission_refusal,
            tls=tls(settings),
        )
    return 0


def warm(extras: frozenset[str]) -> None:
    """Import, in the background, the libraries of the backends this server's settings
    select (the Kubernetes client takes ~1 s of CPU): its first deliveries need them, and
    would otherwise import them one at a time behind the import lock, a burst of them
    queueing. A long-running server pays this once, while it waits for its first event;
    a function's cold start (functions-framework) does not.

    Not signing's: the configured signer is built at start with what it uses, and the rest
    (Sigstore, model_signing, pydantic: ~1 s of CPU) is verification's, which a server may
    never do; importing it meanwhile took ~15 % of the signing chain's first seconds."""
    import importlib
    import threading

    from modelhooks.core.extras import MODULES

    def load() -> None:
        for extra in sorted(extras - {"signing"}):
            for module in MODULES[extra]:
                try:
                    importlib.import_module(module)
                except Exception:  # the delivery that needs it says what failed
                    continue

    threading.Thread(target=load, name="warm-imports", daemon=True).start()


def limits(settings: Settings) -> Limits:
    from modelhooks.delivery.admission import PATHS

    s = settings.serve
    return Limits(
        threads=s.threads,
        read_timeout=s.read_timeout,
        keepalive=s.keepalive,
        max_body_bytes=settings.ingress.max_body_bytes,
        path_body_bytes=tuple((p, settings.admission.max_review_bytes) for p in PATHS),
    )


def tls(settings: Settings) -> tuple[str, str] | None:
    """HTTPS (the admission webhook's certificate) when both files are set."""
    a = settings.admission
    if bool(a.tls_cert_file) != bool(a.tls_key_file):
        from modelhooks.core.errors import ConfigError

        raise ConfigError(
            "MODELHOOKS_ADMISSION_TLS_CERT_FILE and MODELHOOKS_ADMISSION_TLS_KEY_FILE: set both"
        )
    return (a.tls_cert_file, a.tls_key_file) if a.tls_cert_file else None


def admission_refusal(path: str, error: ModelhooksError) -> Response | None:
    """An AdmissionReview too big or too slow to read is denied as one (with the reason)."""
    from modelhooks.delivery.admission import PATHS, refused

    return refused(error) if path.rstrip("/") in PATHS else None


def build_handler(settings: Settings) -> Handler:
    """The routes of `serve`, with the local store watcher running (unless it hosts only
    some functions: serve.functions)."""
    from modelhooks.adapters.object_store.watch import LocalStoreWatcher
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import routes

    app = build(settings)
    broker = app.broker()
    only = frozenset(n.strip() for n in settings.serve.functions.split(",") if n.strip())
    unknown = only - set(app.delivery.names)
    if unknown:
        from modelhooks.core.errors import ConfigError

        raise ConfigError(
            f"MODELHOOKS_SERVE_FUNCTIONS: no function {', '.join(sorted(unknown))}; "
            f"known: {', '.join(app.delivery.names)}"
        )
    if not only and settings.store.backend == "local" and settings.serve.watch_interval > 0:
        store = (settings.home / "store").resolve()
        LocalStoreWatcher(
            store, app.delivery.layout, broker.publish, settings.serve.watch_interval
        ).start()
    return routes(broker, only)


def _status(settings: Settings, signer: str | None) -> str:
    """What this server does, in a few lines: where things go, and how."""
    from modelhooks.handlers import NAMES

    registry = {
        "kubeflow": f"Kubeflow Model Registry at {settings.registry.url}",
        "kubernetes": "Kubernetes resources (RegisteredModel, ModelVersion; shared namespace "
        f"{settings.registry.namespace})",
    }.get(settings.registry.backend, f"SQLite {(settings.home / 'registry.db').resolve()}")
    store = (
        "cloud (gs:// → GCS, s3:// → S3)"
        if settings.store.backend == "cloud"
        else f"local {(settings.home / 'store').resolve()} (scanned every "
        f"{settings.serve.watch_interval:g} s for ready markers)"
    )
    mode = (
        f"forwarding canonical events to {settings.router.sink} (K_SINK): no function runs here"
        if settings.router.sink
        else f"routing by the Triggers; {_where(settings.router.subscribers)}"
    )
    return (
        f"functions: {', '.join(NAMES)}; {mode}\n"
        f"registry:  {registry}\n"
        f"store:     {store}\n"
        f"signing:   {'on, as ' + signer if signer else 'off (set --signing-key to sign)'}\n"
    )


def _where(spec: str) -> str:
    """Where the functions run: in-process, or at their subscribers' URLs."""
    from modelhooks.delivery.remote import subscribers

    table = subscribers(spec)
    if not table:
        return "every function in-process"
    return "run elsewhere: " + ", ".join(f"{name} at {url}" for name, url in table.items())


def _banner(host: str, port: int, store: Path, settings: Settings) -> str:
    example = store / "models" / settings.layout.prefix_for("demo", "1")
    scheme = "https" if settings.admission.tls_cert_file else "http"
    return f"""modelhooks serving on {scheme}://{host}:{port}
  POST /                   route events through the Triggers (infra/knative/triggers.yaml)
  POST /functions/<name>   call one function
  POST /admission/validate, /admission/mutate   AdmissionReviews (admission webhooks)
  GET  /healthz
state: {settings.home.resolve()}   (registry: registry.db, store: store/<bucket>/)

Drop a model into the local store (the ready marker {settings.layout.marker} makes it count):
  mkdir -p {example} && echo weights > {example}/weights.bin && touch {example}/{settings.layout.marker}
Replay the bundled samples (real GCS, S3, OCI, Kubernetes notifications):
  .venv/bin/modelhooks replay events/samples --ingress-registry-host zot.local:5000 \\
      --to http://{host}:{port}/
See what got registered:
  .venv/bin/modelhooks registry list
Stop with Ctrl-C (before another `make run`: the port is taken while this one runs).

"""
