"""`modelhooks watch-models`: a local ApiServerSource for Model resources."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from modelhooks.cli import common
from modelhooks.core.errors import ConfigError, ModelhooksError

__all__ = ["add_parser"]


def add_parser(sub: Any, common_flags: argparse.ArgumentParser) -> None:
    wm = sub.add_parser(
        "watch-models",
        parents=[common_flags],
        help="send Model resource changes as ApiServerSource events (a local ApiServerSource)",
    )
    wm.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster or ~/.kube/config)")
    wm.add_argument("--namespace", help="one namespace (default: all)")
    wm.add_argument("--to", metavar="URL", help="POST to this URL instead of in-process")
    wm.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kubernetes import config

    from modelhooks.adapters.kubernetes.model_source import watch_models
    from modelhooks.cli.replay import to_events

    settings = common.settings(args)
    try:
        if args.kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            api = config.new_client_from_config(config_file=args.kubeconfig)
        else:
            config.load_incluster_config()
            from kubernetes import client

            api = client.ApiClient()
    except (config.ConfigException, OSError) as exc:
        where = args.kubeconfig or "~/.kube/config (or $KUBECONFIG)"
        raise ConfigError(
            f"no usable Kubernetes configuration in {where}: {exc}; "
            "pass --kubeconfig FILE, or run inside a cluster"
        ) from None
    send_one = (
        common.http_sender(args.to, "structured") if args.to else common.local_sender(settings)
    )

    def send(doc: dict[str, Any]) -> None:
        for event in to_events([("watch", doc)], settings.layout.object_layout()):
            ok, reason = (
                (False, event.message) if isinstance(event, ModelhooksError) else send_one(event)
            )
            print(f"{doc['type']} {doc['subject']}: {'ok' if ok else reason}", file=sys.stderr)

    print(f"watching Models on {api.configuration.host}", file=sys.stderr, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        watch_models(api, send, namespace=args.namespace)
    return 0
