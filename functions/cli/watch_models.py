"""`modelhooks watch-models`: a local ApiServerSource for Model resources."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from modelhooks.cli import argtypes, common
from modelhooks.core.errors import BadRequest, ConfigError, ModelhooksError, Unavailable
from modelhooks.core.logs import configure

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
        type=argtypes.positive,  # not given: MODELHOOKS_WATCH_CONCURRENCY, read by run
        metavar="N",
        help="events of N different Models sent at once; one Model's always in order, one at a "
        "time (env MODELHOOKS_WATCH_CONCURRENCY; default 8; 1: every event in order)",
    )
    wm.add_argument(
        "--backoff-delay",
        type=_backoff,  # not given: MODELHOOKS_WATCH_BACKOFF_DELAY, read by run
        metavar="SECONDS",
        help=f"a delivery refused as transient (5xx, 429, no answer) is sent again after this, "
        f"then twice as long each time, {RETRIES} times; then its Model is set aside (an ERROR "
        f"line names it) and sent again later, the waits doubling on up to {LONGEST:g} s, "
        "its later events behind it, while the other Models go on. When the target answers "
        "no delivery through all those retries of one, the watch stops (exit 3) "
        "(env MODELHOOKS_WATCH_BACKOFF_DELAY; default 0.5)",
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
    if args.concurrency is None:
        args.concurrency = argtypes.environment(
            "MODELHOOKS_WATCH_CONCURRENCY", argtypes.positive, "8"
        )
    if args.backoff_delay is None:
        args.backoff_delay = argtypes.environment("MODELHOOKS_WATCH_BACKOFF_DELAY", _backoff, "0.5")
    if args.raw and not args.to:
        raise BadRequest("--raw sends to a server: give --to URL")
    configure("WARNING")  # a Model set aside, a watch interrupted: JSON lines on stderr
    settings = common.settings(args)
    api = _api_client(args.kubeconfig)
    delay = args.backoff_delay
    send = _raw_sender(args.to, delay) if args.raw else _canonical_sender(args, settings, delay)
    watcher = ModelWatcher(
        api,
        send,
        namespace=args.namespace,
        reference=_MODES[args.mode],
        state_file=args.state,
        concurrency=args.concurrency,
        namespace_selector=args.namespace_selector,
        set_aside=(min(delay * 2**RETRIES, LONGEST), LONGEST),
    )
    where = f" in namespaces {args.namespace_selector}" if args.namespace_selector else ""
    _say(f"watching Models on {api.configuration.host}{where}")
    kept = f"; the position is kept in {args.state}" if args.state else ""
    with common.interruptible(lambda: f"stopped watching{kept}"):
        try:
            watcher.run()
        except _TargetDown as down:
            raise down.error from None
    return 0


def _api_client(kubeconfig: str | None) -> Any:
    from kubernetes import client, config

    from modelhooks.adapters.kube_client import client_from

    try:
        if kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            return client_from(kubeconfig)
        config.load_incluster_config()
        return client.ApiClient()
    except (config.ConfigException, OSError, ValueError) as exc:
        where = kubeconfig or "~/.kube/config (or $KUBECONFIG)"
        raise ConfigError(
            f"no usable Kubernetes configuration in {where}: {exc}; "
            "pass --kubeconfig FILE, or run inside a cluster"
        ) from None


# A delivery refused as transient (5xx, 429, no answer) is retried as a Knative Trigger
# retries (exponential, from --backoff-delay); after the last retry its Model is set aside
# (ModelWatcher: sent again later, up to LONGEST apart) unless the target answered nothing
# meanwhile, to it or to any other delivery: then the watch stops with exit status 3, and
# its restart (a Pod's) lists the Models again and sends what it has not sent.
RETRIES = 6
LONGEST = 300.0  # s: the longest wait before a Model set aside is sent again


def _backoff(text: str) -> float:
    value = argtypes.non_negative(text)
    if not 0 < value <= LONGEST:
        raise argparse.ArgumentTypeError(f"{text!r}: must be over 0 and at most {LONGEST:g}")
    return value


class _TargetDown(Exception):
    """The target answered no delivery through every retry of one (`error`): not one Model's
    trouble, so not set aside; the watch stops."""

    def __init__(self, error: Unavailable) -> None:
        super().__init__(error.message)
        self.error = error


class _Answers:
    """How many deliveries' attempts the target has answered, whatever it answered."""

    def __init__(self) -> None:
        self._count, self._lock = 0, threading.Lock()

    def seen(self) -> int:
        with self._lock:
            return self._count

    def add(self) -> None:
        with self._lock:
            self._count += 1


def _canonical_sender(args: argparse.Namespace, settings: Any, delay: float) -> Any:
    from modelhooks.cli.replay import to_events

    answers = _Answers()
    send_one = (
        common.http_sender(args.to, "structured") if args.to else common.local_sender(settings)
    )

    def send(doc: dict[str, Any]) -> None:
        for event in to_events([("watch", doc)], settings.layout.object_layout()):
            if isinstance(event, ModelhooksError):
                outcome = event.message
            else:
                outcome = _delivered(partial(send_one, event), doc, answers, delay)
            _say(f"{doc['type']} {doc['subject']}: {outcome}")

    return send


def _raw_sender(url: str, delay: float) -> Any:
    answers = _Answers()
    pool = common.http_pool(url)
    headers = {"Content-Type": "application/cloudevents+json"}

    def send(doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        outcome = _delivered(lambda: common.post(pool, url, body, headers), doc, answers, delay)
        _say(f"{doc['type']} {doc['subject']}: {outcome}")

    return send


def _say(line: str) -> None:
    """`line` on stderr, or nothing when it cannot take it (its reader, the log pipeline,
    gone): the BrokenPipeError of a delivery's line stopped the watch."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: stderr closed
        print(line, file=sys.stderr, flush=True)


def _delivered(
    post: Callable[[], tuple[int, str]], doc: dict[str, Any], answers: _Answers, delay: float
) -> str:
    """`post` until it is not refused as transient: "ok", or the reason of a refusal.
    Unavailable when every retry was refused, _TargetDown when no attempt of it nor of any
    other delivery (`answers`) got an answer meanwhile."""
    before, attempt = answers.seen(), 0
    while True:
        try:
            status, reason = post()
            answers.add()
        except Unavailable as exc:
            status, reason = 503, exc.message
        if status < 500 and status != 429:
            if status < 300:  # a 2xx with a reason: a refusal told as a reply
                return reason or "ok"
            return reason
        what = f"{doc['type']} {doc['subject']}"
        if attempt == RETRIES:
            error = Unavailable(f"{what} not delivered after {RETRIES} retries: {reason}")
            if answers.seen() == before:
                raise _TargetDown(error)
            raise error
        _say(f"{what}: {reason}; again in {delay:g} s")
        time.sleep(delay)
        delay, attempt = delay * 2, attempt + 1
