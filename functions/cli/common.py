"""What every command shares: settings as flags, the two ways to send an event (into
this process's broker, or POSTed to a URL), what Ctrl-C reports, a free port."""

from __future__ import annotations

import argparse
import errno
import http.client
import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from modelhooks.core.errors import ConfigError, Unavailable
from modelhooks.core.settings import Settings, describe, load_settings

__all__ = [
    "check_port",
    "http_pool",
    "http_reason",
    "http_sender",
    "interruptible",
    "local_sender",
    "model_and_version",
    "settings",
    "settings_parser",
    "skipped",
]


def settings_parser(sections: frozenset[str] | None = None) -> argparse.ArgumentParser:
    """A parent parser with the settings a command uses as flags (`--<section>-<name>`):
    those of `sections` (top-level names such as `home`, or sections such as `registry`),
    every one when None. `modelhooks settings --markdown` lists them all."""
    specs = [s for s in describe() if sections is None or s.path[0] in sections]
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group(
        "settings (flag > environment > config file > default)",
        # listed, not described: `modelhooks settings --markdown` has each one's meaning,
        # environment variable and default, and `modelhooks settings` the effective values
        "each takes a value; `modelhooks settings --markdown` describes them: "
        + ", ".join(s.flag for s in specs),
    )
    group.add_argument("--config", type=Path, help="YAML config file (env MODELHOOKS_CONFIG)")
    for spec in specs:
        group.add_argument(
            spec.flag,
            dest=f"setting:{spec.name}",
            metavar=spec.path[-1].upper(),
            help=argparse.SUPPRESS,
        )
    return parent


def settings(args: argparse.Namespace) -> Settings:
    """The settings: flags > environment > config file > defaults."""
    flags = {k.split(":", 1)[1]: v for k, v in vars(args).items() if k.startswith("setting:")}
    return load_settings(flags, config_file=args.config)


def local_sender(settings: Settings) -> Any:
    """Send into this process's broker; (status, reason) per event: the worst status of
    the functions that failed (a transient one when any was), 200 when none did, with the
    reason of each refusal for good a function told as a reply (see `told_refusals`)."""
    from modelhooks.bootstrap import build
    from modelhooks.core.logs import configure
    from modelhooks.delivery.encoding import outcome_reason

    app = build(settings)
    broker = app.broker()
    configure("WARNING")  # the progress bar and summary speak; per-event logs would drown them

    def send(event: Any) -> tuple[int, str]:
        outcomes = broker.publish(event)
        failed = [o for o in outcomes if o.status >= 300]
        if failed:
            worst = max(o.status for o in failed)
            return worst, "; ".join(outcome_reason(o.as_json()) for o in failed)
        return 200, _told_or_skipped([o.as_json() for o in outcomes])

    return send


def http_reason(status: int, text: str) -> str:
    """The reason of a failed HTTP delivery: every failed function's, else the body."""
    from modelhooks.delivery.encoding import answer_reason

    return f"HTTP {status}: {answer_reason(text)}"


def http_pool(url: str) -> Any:
    """Kept-alive connections for POSTing to `url` (`endpoints.endpoint_pool`: its proxy and CA
    bundle from the environment, read once; a POST costs about half a requests Session's
    CPU, which was most of watch-models' own in a burst of Models)."""
    from modelhooks.adapters.endpoints import endpoint_pool

    return endpoint_pool(url)


def http_sender(url: str, mode: str, extra: dict[str, str] | None = None) -> Any:
    """POST to `url` in binary or structured mode (with `extra` headers); (status, reason)
    per event. Unavailable when `url` does not answer (the next event would not get an
    answer either)."""
    from modelhooks.delivery.encoding import binary, structured

    pool = http_pool(url)

    def send(event: Any) -> tuple[int, str]:
        if mode == "structured":
            body = json.dumps(structured(event)).encode()
            headers = {"Content-Type": "application/cloudevents+json"}
        else:
            msg = binary(event)
            body, headers = msg.body, msg.headers
        return post(pool, url, body, {**headers, **(extra or {})})

    return send


ANSWER_SECONDS = 60.0  # an answer's whole time: its headers, then its body
MAX_ANSWER_BYTES = 1 << 20  # of an answer's body: its reason is read from it
MAX_REASON_CHARS = 1000  # of a reason that is no answer of ours (an error page)


def post(pool: Any, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    """(status, reason) of one POST through `pool` (`http_pool`); Unavailable when `url`
    does not answer within ANSWER_SECONDS. The answer's body is read as at most
    MAX_ANSWER_BYTES and until then: a target answering 500 with a body of 1 GiB was held
    whole in memory (3 GB of replay's), one trickling a byte a second held it for ever."""
    try:  # no retries, as requests: a delivery's retries are the caller's
        resp = pool.request(
            "POST", url, body=body, headers=headers, timeout=ANSWER_SECONDS, preload_content=False
        )
    except OSError as exc:  # endpoints.HttpFailed: no answer
        raise Unavailable(f"{url} did not answer: {_why(exc)}", url=url) from None
    try:
        data = _answer(resp, time.monotonic() + ANSWER_SECONDS)
    except (OSError, http.client.HTTPException) as exc:
        raise Unavailable(f"{url} did not answer: {_why(exc)}", url=url) from None
    finally:
        resp.release_conn()  # its connection closed if some of it was left unread
    if resp.status < 300:
        return resp.status, told_refusals(dict(resp.headers), data) or _skips(data)
    reason = http_reason(resp.status, data.decode(errors="replace"))
    return resp.status, _cut(reason, MAX_REASON_CHARS)


TOLD = "refused for good, told as a reply: "


def told_refusals(headers: dict[str, str], body: bytes) -> str:
    """The refusals for good a 2xx answer's replies tell: register, sign and cleanup answer
    a Model's version or deletion they refuse with 200 and a reply carrying why (`refused`
    of a `model.refused` or `artifact.purged`), so that the platform routes it to notify;
    nothing was done, and `replay` counts it as refused. "" when the answer tells none
    (or is no reply of ours: a sink took the replies, a skip, an error page)."""
    from modelhooks.core.errors import ModelhooksError
    from modelhooks.events.ingress import decode

    try:
        replies = decode(headers, body, max_bytes=MAX_ANSWER_BYTES)
    except ModelhooksError:
        return ""
    reasons = [
        TOLD + str(r.data["refused"])
        for r in replies
        if isinstance(r.data, dict) and r.data.get("refused")
    ]
    return "; ".join(reasons)


SKIPPED = "skipped: "


def skipped(reasons: list[str]) -> str:
    """The reason of an event every function that took it skipped, on purpose, and none
    replied (as serve answers it: 200 `{"skipped": [...]}`): SKIPPED and their reasons, or
    "" when none skipped. Nothing was done; sending it again will do nothing either."""
    said = [r for r in dict.fromkeys(reasons) if r]
    return SKIPPED + "; ".join(said) if said else ""


def _skips(body: bytes) -> str:
    """What a 2xx answer of serve's that carries no reply says, or "" (replies, a sink's
    204, no answer of ours): a function's route answers `{"skipped": [outcome, …]}`, the
    broker's (`/`) `{"events": […], "outcomes": [outcome, …]}` of the whole chain, the
    ingress (with a sink) its `outcomes` and what it `forwarded`. A refusal for good told on
    the Model is an outcome of status 200 with its error (as `local_sender` reads it); else
    the event was skipped when none of them replied (as a function's route says)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's recursion
        return ""
    if not isinstance(doc, dict) or doc.get("forwarded"):
        return ""
    outcomes = doc.get("skipped", doc.get("outcomes"))
    if not isinstance(outcomes, list):
        return ""
    return _told_or_skipped([o for o in outcomes if isinstance(o, dict)])


def _told_or_skipped(outcomes: list[dict[str, Any]]) -> str:
    """What the outcomes (`Outcome.as_json`) of an event none failed say: the refusals for
    good told as replies (status 200 with an error), else, when none replied, the skips."""
    told = [
        f"{TOLD}{o.get('function')}: {o['error'].get('message')}"
        for o in outcomes
        if isinstance(o.get("error"), dict) and o.get("status") == 200
    ]
    if told:
        return "; ".join(told)
    if any(o.get("replies") for o in outcomes):
        return ""
    return skipped([str(o.get("skipped") or "") for o in outcomes])


def _answer(resp: Any, deadline: float) -> bytes:
    """The answer's body, at most MAX_ANSWER_BYTES of it, read before `deadline`
    (net.Late, a TimeoutError, past it)."""
    from modelhooks.adapters.net import read_before

    data = read_before(resp, MAX_ANSWER_BYTES, deadline)
    if len(data) < MAX_ANSWER_BYTES:
        resp.read(0)  # at its end: its connection back to the pool (a chunked one too)
    return data


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most] + f"… ({len(text) - most} more characters)"


def _why(exc: Exception) -> str:
    """The reason under the pool's failure (its `reason`): "Connection refused", a timeout, …"""
    reason = getattr(exc, "reason", None) or exc
    if isinstance(reason, TimeoutError):
        return f"no answer within {ANSWER_SECONDS:g} s"
    found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(reason))
    return (
        found.group(1).strip()
        if found
        else getattr(reason, "strerror", None) or type(reason).__name__
    )


def model_and_version(registry: Any, text: str) -> tuple[str, str]:
    """`MODEL[/VERSION]` as (model, version or ""). A model's name may hold "/" (an OCI
    repository, `ml-prod/models/sentiment`): the whole text is the model when the registry
    has one of that name, else the part after the last "/" is the version."""
    if "/" not in text or registry.get_model(text) is not None:
        return text, ""
    name, _, version = text.rpartition("/")
    return name, version


@contextmanager
def interruptible(done: Callable[[], str]) -> Iterator[None]:
    """Ctrl-C inside the block says what was done so far: `modelhooks.cli.main` prints
    `interrupted: <done()>` and exits 130."""
    try:
        yield
    except KeyboardInterrupt:
        raise KeyboardInterrupt(done()) from None


def check_port(host: str, port: int) -> None:
    """ConfigError when `host:port` cannot be listened on (another server has it), checked
    before anything starts: a server that cannot listen must not act on the state first.
    Port 0 (any free port) too: a host that is not this machine's (not resolved, not one of
    its addresses) failed only when the server bound, an os_error exiting 3 (transient)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except (OSError, OverflowError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            if getattr(exc, "errno", None) == errno.EADDRINUSE:
                why += " (another `modelhooks serve`?): stop it, or choose another --port"
            raise ConfigError(
                f"cannot listen on {host}:{port}: {why}", setting="serve.host, serve.port"
            ) from None
