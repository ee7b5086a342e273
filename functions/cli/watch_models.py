"""`modelhooks watch-models`: a local ApiServerSource for Model resources."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from modelhooks.cli import argtypes, common
from modelhooks.core.errors import BadRequest, ConfigError, ModelhooksError, Unavailable

__all__ = ["add_parser"]

_MODES = {"resource": False, "reference": True}


def add_parser(sub: Any, common_flags: argparse.ArgumentParser) -> None:
    wm = sub.add_parser(
        "watch-models",
        parents=[common_flags],
        help="send Model resource changes as ApiServerSource events (a local ApiServerSource)",
        description="Watch Model resources and send each add, update and delete as the "
        "CloudEvent Knative's ApiServerSource sends (dev.knative.apiserver.resource.* or .ref.*)"
        ", resuming from the last resourceVersion after a disconnect and listing again (only "
        "what changed is sent) when it has expired.",
    )
    wm.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster or ~/.kube/config)")
    wm.add_argument("--namespace", help="one namespace (default: all)")
    wm.add_argument(
        "--namespace-selector",
        default=os.environ.get("MODELHOOKS_WATCH_NAMESPACE_SELECTOR") or None,
        metavar="LABELS",
        help="only the Models of namespaces this label selector matches, e.g. "
        "modelhooks.dev/models=enabled, followed as namespaces are labelled and unlabelled; a "
        "namespace that stops matching is no deletion (env MODELHOOKS_WATCH_NAMESPACE_SELECTOR; "
        "default: every namespace)",
    )
    wm.add_argument(
        "--mode",
        type=str.lower,
        choices=sorted(_MODES),
        default=os.environ.get("MODELHOOKS_WATCH_MODE", "resource").lower(),
        help="ApiServerSource mode: Resource (data = the whole Model) or Reference (data = "
        "{kind, namespace, name, apiVersion}) (env MODELHOOKS_WATCH_MODE; default Resource)",
    )
    wm.add_argument(
        "--state",
        type=Path,
        default=os.environ.get("MODELHOOKS_WATCH_STATE") or None,
        metavar="FILE",
        help="keep the last resourceVersion and what was sent here, so a restarted watcher "
        "sends only what changed meanwhile (env MODELHOOKS_WATCH_STATE; default: none, a "
        "start sends every Model as added)",
    )
    wm.add_argument(
        "--concurrency",
        type=argtypes.positive,
        default=os.environ.get("MODELHOOKS_WATCH_CONCURRENCY") or "8",
        metavar="N",
        help="events of N different Models sent at once; one Model's always in order, one at a "
        "time (env MODELHOOKS_WATCH_CONCURRENCY; default 8; 1: every event in order)",
    )
    wm.add_argument(
        "--to", metavar="URL", type=argtypes.http_url, help="POST here instead of in-process"
    )
    wm.add_argument(
        "--raw",
        action="store_true",
        help="with --to: POST the ApiServerSource events themselves (as Knative does), "
        "so the server translates them; default: the canonical events they translate to",
    )
    wm.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modelhooks.adapters.kubernetes.model_source import ModelWatcher

    if args.mode not in _MODES:  # from the environment, which argparse does not check
        raise ConfigError(f"MODELHOOKS_WATCH_MODE: {args.mode!r} is not Resource or Reference")
    if args.raw and not args.to:
        raise BadRequest("--raw sends to a server: give --to URL")
    settings = common.settings(args)
    api = _api_client(args.kubeconfig)
    send = _raw_sender(args.to) if args.raw else _canonical_sender(args, settings)
    watcher = ModelWatcher(
        api,
        send,
        namespace=args.namespace,
        reference=_MODES[args.mode],
        state_file=args.state,
        concurrency=args.concurrency,
        namespace_selector=args.namespace_selector,
    )
    where = f" in namespaces {args.namespace_selector}" if args.namespace_selector else ""
    print(f"watching Models on {api.configuration.host}{where}", file=sys.stderr, flush=True)
    kept = f"; the position is kept in {args.state}" if args.state else ""
    with common.interruptible(lambda: f"stopped watching{kept}"):
        watcher.run()
    return 0


def _api_client(kubeconfig: str | None) -> Any:
    from kubernetes import client, config

    try:
        if kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            return config.new_client_from_config(config_file=kubeconfig)
        config.load_incluster_config()
        return client.ApiClient()
    except (config.ConfigException, OSError) as exc:
        where = kubeconfig or "~/.kube/config (or $KUBECONFIG)"
        raise ConfigError(
            f"no usable Kubernetes configuration in {where}: {exc}; "
            "pass --kubeconfig FILE, or run inside a cluster"
        ) from None


# A delivery refused as transient (5xx, 429, no answer) is retried as a Knative Trigger
# retries (exponential, from 0.5 s); after the last retry the watch stops with exit status 3,
# and its restart (a Pod's) lists the Models again and sends what it has not sent.
RETRIES = 6


def _canonical_sender(args: argparse.Namespace, settings: Any) -> Any:
    from modelhooks.cli.replay import to_events

    send_one = (
        common.http_sender(args.to, "structured") if args.to else common.local_sender(settings)
    )

    def send(doc: dict[str, Any]) -> None:
        for event in to_events([("watch", doc)], settings.layout.object_layout()):
            if isinstance(event, ModelhooksError):
                outcome = event.message
            else:
                outcome = _delivered(partial(send_one, event), doc)
            print(f"{doc['type']} {doc['subject']}: {outcome}", file=sys.stderr)

    return send


def _raw_sender(url: str) -> Any:
    pool = common.http_pool(url)
    headers = {"Content-Type": "application/cloudevents+json"}

    def send(doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        outcome = _delivered(lambda: common.post(pool, url, body, headers), doc)
        print(f"{doc['type']} {doc['subject']}: {outcome}", file=sys.stderr)

    return send


def _delivered(post: Callable[[], tuple[int, str]], doc: dict[str, Any]) -> str:
    """`post` until it is not refused as transient: "ok", or the reason of a refusal."""
    delay, attempt = 0.5, 0
    while True:
        try:
            status, reason = post()
        except Unavailable as exc:
            status, reason = 503, exc.message
        if status < 500 and status != 429:
            return "ok" if status < 300 else reason
        if attempt == RETRIES:
            raise Unavailable(
                f"{doc['type']} {doc['subject']} not delivered after {RETRIES} retries: {reason}"
            )
        print(f"{doc['type']} {doc['subject']}: {reason}; again in {delay:g} s", file=sys.stderr)
        time.sleep(delay)
        delay, attempt = delay * 2, attempt + 1
