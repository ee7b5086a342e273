"""`modelhooks dead-letter`: the dead-letter sink the Knative Broker and Triggers deliver to
(see modelhooks.delivery.dead_letter). Authentication and the body limit are the ingress
settings (`ingress.auth`, `ingress.max_body_bytes`); it keeps events under
`$MODELHOOKS_HOME/dead-letter/`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from modelhooks.cli import common

__all__ = ["add_parser"]


def add_parser(sub: Any, common_flags: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "dead-letter",
        parents=[common_flags],
        help="keep dead-lettered events as JSON lines for `modelhooks replay`",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from werkzeug.serving import make_server

    from modelhooks.bootstrap import build
    from modelhooks.delivery.dead_letter import DeadLetterStore, create_app

    settings = common.settings(args)
    store = DeadLetterStore(settings.home / "dead-letter")
    app = create_app(build(settings).delivery.auth, store, settings.ingress.max_body_bytes)
    server = make_server(settings.serve.host, settings.serve.port, app, threaded=True)
    host, port = str(server.server_address[0]), int(server.server_address[1])
    print(
        f"modelhooks dead-letter on http://{host}:{port}/ keeping events in {store.directory}",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
