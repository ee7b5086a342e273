"""The dead-letter sink: where the Broker and every Trigger send an event they gave up on
(retries exhausted, or a permanent 4xx). It keeps each one for `modelhooks replay`:

- one structured CloudEvent per line, Knative's knativeerrordest / knativeerrorcode /
  knativeerrordata extensions kept, appended (and fsynced) to
  `$MODELHOOKS_HOME/dead-letter/<UTC date>.jsonl`, and
- the same line on stdout, so the cluster's log pipeline has a copy (a copy: when stdout
  cannot take it, its reader gone, the file still does and the sink answers 202).

It answers 202 once the line is written (so the Broker stops), 401 without the configured
credentials (`ingress.auth`), 413 over `ingress.max_body_bytes`, 400 with a JSON reason to a
body it cannot read, and never has a dead-letter sink of its own. Replay after fixing the
cause (canonical ids are stable, every effect is idempotent):

    modelhooks replay ./dead-letter --to http://broker-ingress.knative-eventing.svc.cluster.local/modelhooks/modelhooks
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from threading import Lock
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from modelhooks.core.errors import BadRequest, ModelhooksError, Unavailable
from modelhooks.core.logs import log
from modelhooks.delivery.encoding import Response, error_response, json_response
from modelhooks.delivery.http import Handler, flask_app, guarded
from modelhooks.delivery.routes import RouteAuth

if TYPE_CHECKING:
    import flask

__all__ = ["DeadLetterStore", "create_app", "receive", "records", "routes"]

_JSON_TYPES = ("application/json", "text/json")


def records(headers: Mapping[str, str], body: bytes) -> list[dict[str, Any]]:
    """The CloudEvents of one delivery, as structured-mode dicts (BadRequest if unreadable)."""
    h = {k.lower(): v for k, v in headers.items()}
    ctype = h.get("content-type", "")
    try:
        if ctype.startswith("application/cloudevents-batch+json"):
            events = json.loads(body)
            if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
                raise BadRequest("a CloudEvents batch must be a JSON array of objects")
            return events
        if ctype.startswith("application/cloudevents+json"):
            event = json.loads(body)
            if not isinstance(event, dict):
                raise BadRequest("a structured CloudEvent must be a JSON object")
            return [event]
        event = {k[3:]: unquote(v) for k, v in h.items() if k.startswith("ce-")}
        if "specversion" not in event:
            raise BadRequest("not a CloudEvent: no ce-specversion header", field="ce-specversion")
        if ctype:
            event["datacontenttype"] = ctype
        if body:
            media = ctype.split(";")[0].strip()
            if media in _JSON_TYPES or media.endswith("+json"):
                event["data"] = json.loads(body)
            else:
                event["data_base64"] = base64.b64encode(body).decode()
        return [event]
    except (ValueError, RecursionError) as exc:  # JSON errors are ValueErrors
        raise BadRequest(f"body is not valid JSON: {exc}", field="body") from None


@dataclass
class DeadLetterStore:
    """Appends events to `<directory>/<UTC date>.jsonl` (fsynced) and echoes them to stdout."""

    directory: Path
    _lock: Lock = field(default_factory=Lock, repr=False)
    _echo: bool = field(default=True, repr=False)  # stdout takes the copies

    def store(self, events: list[dict[str, Any]], now: datetime | None = None) -> Path:
        now = now or datetime.now(UTC)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{now:%Y-%m-%d}.jsonl"
        lines = "".join(json.dumps(e, sort_keys=True) + "\n" for e in events)
        with self._lock:
            _append(path, lines.encode())
            if self._echo:
                self._echo = _echoed(lines)
        return path


def _echoed(lines: str) -> bool:
    """`lines` copied to stdout; False, said once, when it cannot take them (its reader, the
    log pipeline, is gone): the events are kept in the file, and the sink answered 500 to
    every delivery, kept yet sent again and again by the Broker, then given up."""
    try:
        sys.stdout.write(lines)
        sys.stdout.flush()
    except (OSError, ValueError) as exc:  # BrokenPipeError; ValueError: closed
        log(logging.WARNING, f"dead-letter: no copies on stdout from now on: {exc}")
        return False
    return True


def _append(path: Path, data: bytes) -> None:
    """`data` appended to `path` and fsynced, or nothing: a write that fails (the disk full)
    is cut off where it began, else the next event appended went on its half line, and
    replay could read neither (the sink had answered 202 to the second). A half line a
    process killed mid-write left (SIGKILL, the node gone) is ended first, for the same
    reason. The file is one the sink made: a link put in its place is not followed (the
    events went into whatever it named, outside the directory) and what is not a regular
    file (a directory, a FIFO: each a 500 and a traceback) keeps nothing, Unavailable (503
    naming it: the Broker sends them again)."""
    try:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR):
            raise
        fd = -1
    if fd < 0 or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd >= 0:
            os.close(fd)
        raise Unavailable(f"dead-letter: {path} is not a regular file: nothing is kept there")
    try:
        # another sink on the same volume (two replicas, an old pod still stopping) appends
        # to this file too: without the lock, one's failed write cut the file back to where
        # it began, the other's line appended since with it (answered 202, lost)
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = os.fstat(fd).st_size
        if start and os.pread(fd, 1, start - 1) != b"\n":
            data = b"\n" + data
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


def receive(
    headers: Mapping[str, str],
    body: bytes,
    *,
    auth: RouteAuth,
    store: DeadLetterStore,
    path: str = "/",
) -> Response:
    """One delivery to the sink: authenticate, read, keep; 202 once written."""
    try:
        auth.check(path, headers, body)
        events = records(headers, body)
    except ModelhooksError as exc:
        return error_response(exc)
    store.store(events)
    return json_response(202, {"stored": len(events)})


def routes(auth: RouteAuth, store: DeadLetterStore) -> Handler:
    """`POST` (any path) keeps a delivery; `GET` answers readiness."""

    def handle(method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        if method == "GET":
            return json_response(200, {"status": "ok"})
        return receive(headers, body, auth=auth, store=store, path=path)

    return guarded(handle, "modelhooks dead-letter")


def create_app(auth: RouteAuth, store: DeadLetterStore, max_body_bytes: int) -> flask.Flask:
    """The sink as a Flask app (tests)."""
    return flask_app(routes(auth, store), max_body_bytes)
