"""`modelhooks dead-letter`: the dead-letter sink the Knative Broker and Triggers deliver to
(see modelhooks.delivery.dead_letter). Authentication and the body limit are the ingress
settings (`ingress.auth`, `ingress.max_body_bytes`); it keeps events under
`$MODELHOOKS_HOME/dead-letter/`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from modelhooks.cli import common

__all__ = ["SETTINGS", "add_parser"]

SETTINGS = frozenset({"home", "log_level", "ingress", "serve"})


def add_parser(sub: Any, common_flags: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "dead-letter",
        parents=[common_flags],
        help="keep dead-lettered events as JSON lines for `modelhooks replay`",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modelhooks import bootstrap
    from modelhooks.cli.serve import limits
    from modelhooks.delivery.dead_letter import DeadLetterStore, routes
    from modelhooks.delivery.server import run as serve

    settings = common.settings(args)
    common.check_port(settings.serve.host, settings.serve.port)
    store = DeadLetterStore(settings.home / "dead-letter")
    auth = bootstrap.build(settings).delivery.auth

    def ready(host: str, port: int) -> None:
        print(
            f"modelhooks dead-letter on http://{host}:{port}/ keeping events in {store.directory}",
            file=sys.stderr,
            flush=True,
        )

    with common.interruptible(lambda: f"stopped; the events kept are in {store.directory}"):
        serve(
            routes(auth, store),
            host=settings.serve.host,
            port=settings.serve.port,
            limits=limits(settings),
            on_ready=ready,
        )
    return 0
