"""`modelhooks serve`: every function in one process, routed by the Trigger YAML."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from modelhooks.cli.common import settings as load_args_settings
from modelhooks.core.settings import Settings

__all__ = ["add_parser"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", parents=[common], help="host every function in one process")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from werkzeug.serving import make_server

    from modelhooks.adapters.object_store.watch import LocalStoreWatcher
    from modelhooks.bootstrap import build
    from modelhooks.delivery.http import create_app
    from modelhooks.events.model import CanonicalEvent

    settings = load_args_settings(args)
    app = build(settings)
    broker = app.broker()
    server = make_server(
        settings.serve.host, settings.serve.port, create_app(broker), threaded=True
    )
    host, port = server.server_address[:2]
    store = (settings.home / "store").resolve()
    print(_banner(str(host), int(port), store, settings), file=sys.stderr, flush=True)

    def publish(event: CanonicalEvent) -> None:
        broker.publish(event)

    watcher = None
    if settings.store.backend == "local" and settings.serve.watch_interval > 0:
        watcher = LocalStoreWatcher(
            store, app.delivery.layout, publish, settings.serve.watch_interval
        )
        watcher.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if watcher:
            watcher.stop()
        server.server_close()
    return 0


def _banner(host: str, port: int, store: Path, settings: Settings) -> str:
    example = store / "models" / settings.layout.prefix_for("demo", "1")
    return f"""modelhooks serving on http://{host}:{port}
  POST /                   route events through the Triggers (infra/knative/triggers.yaml)
  POST /functions/<name>   call one function
  GET  /healthz
state: {settings.home.resolve()}   (registry: registry.db, store: store/<bucket>/)

Drop a model into the local store (the ready marker {settings.layout.marker} makes it count):
  mkdir -p {example} && echo weights > {example}/weights.bin && touch {example}/{settings.layout.marker}
Replay the bundled samples (real GCS, S3, OCI, Kubernetes notifications):
  .venv/bin/modelhooks replay events/samples --ingress-registry-host zot.local:5000 \\
      --to http://{host}:{port}/
See what got registered:
  .venv/bin/modelhooks registry list
"""
