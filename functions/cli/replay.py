"""`modelhooks replay`: send stored events again — to the in-process functions or a URL.

A source is a file (one JSON document, or JSON Lines), a directory of such files, or `-`
(stdin). Each document is an HTTP body as delivered (a structured CloudEvent, a Pub/Sub
push envelope, a native webhook body); it is translated to canonical events first, so
filters apply to canonical types and times. Replaying twice changes nothing the second
time: canonical ids are derived from upstream ids and every effect is idempotent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from modelhooks.cli import common
from modelhooks.core.errors import BadRequest, ModelhooksError
from modelhooks.events.ingress import decode
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import CanonicalEvent
from modelhooks.events.sources import translate

__all__ = ["Summary", "add_parser", "read_documents", "replay", "select"]


@dataclass
class Summary:
    sent: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def lines(self) -> list[str]:
        out = [
            f"sent {self.sent}, succeeded {self.succeeded}, failed {self.failed}, "
            f"skipped {self.skipped}"
        ]
        out += [f"  {n} x {reason}" for reason, n in self.reasons.most_common()]
        return out


def read_documents(source: str) -> Iterator[tuple[str, Any]]:
    """(where, JSON document) for every document in the source."""
    if source == "-":
        yield from _parse("<stdin>", sys.stdin.read())
        return
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl"))
    elif path.is_file():
        files = [path]
    else:
        raise BadRequest(f"replay source {source!r} is not a file, a directory or '-'")
    for f in files:
        yield from _parse(str(f), f.read_text())


def _parse(where: str, text: str) -> Iterator[tuple[str, Any]]:
    try:
        yield where, json.loads(text)
        return
    except json.JSONDecodeError:
        pass
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield f"{where}:{n}", json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadRequest(f"{where}:{n} is not JSON: {exc}") from None


def content_type(doc: Any) -> str:
    """How a stored document goes on the wire (the CloudEvents mode its shape says)."""
    if isinstance(doc, list):
        return "application/cloudevents-batch+json"
    if isinstance(doc, dict) and "specversion" in doc:
        return "application/cloudevents+json"
    return "application/json"


def to_events(
    docs: Iterable[tuple[str, Any]], layout: ObjectLayout, registry_host: str | None = None
) -> Iterator[CanonicalEvent | BadRequest]:
    """Canonical events, or a BadRequest naming the document that does not translate."""
    for where, doc in docs:
        ctype = content_type(doc)
        try:
            for inbound in decode(
                {"Content-Type": ctype}, json.dumps(doc).encode(), max_bytes=1 << 30
            ):
                yield from translate(inbound, layout=layout, registry_host=registry_host)
        except ModelhooksError as exc:
            yield BadRequest(f"{where}: {exc.message}")


def select(
    events: Iterable[CanonicalEvent | BadRequest],
    *,
    types: frozenset[str] = frozenset(),
    since: datetime | None = None,
    until: datetime | None = None,
) -> Iterator[CanonicalEvent | BadRequest]:
    for event in events:
        if isinstance(event, BadRequest):
            yield event
            continue
        if types and event.type not in types:
            continue
        if (since or until) and event.time is None:
            continue
        if since and event.time and event.time < since:
            continue
        if until and event.time and event.time > until:
            continue
        yield event


def replay(
    events: Iterable[CanonicalEvent | BadRequest],
    send: Callable[[CanonicalEvent], tuple[bool, str]],
    *,
    rate: float = 0.0,
    progress: Callable[[], None] = lambda: None,
) -> Summary:
    """Send each event (at most `rate` per second); `send` says (ok, reason). Documents
    that did not translate count as failed, with their reason."""
    summary = Summary()
    interval = 1.0 / rate if rate > 0 else 0.0
    next_at = time.monotonic()
    for event in events:
        if isinstance(event, BadRequest):
            summary.failed += 1
            summary.reasons[event.message] += 1
            progress()
            continue
        if interval:
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += interval
        ok, reason = send(event)
        summary.sent += 1
        if ok:
            summary.succeeded += 1
        else:
            summary.failed += 1
            summary.reasons[reason] += 1
        progress()
    return summary


def utc_time(text: str) -> datetime:
    """An ISO 8601 time; without a zone it is UTC."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def canonical_type(text: str) -> str:
    """A canonical type, full (`dev.modelhooks.artifact.pushed`) or short (`artifact.pushed`)."""
    from modelhooks.events.model import EVENT_TYPES

    full = text if text.startswith("dev.modelhooks.") else f"dev.modelhooks.{text}"
    if full not in EVENT_TYPES:
        known = ", ".join(sorted(t.removeprefix("dev.modelhooks.") for t in EVENT_TYPES))
        raise argparse.ArgumentTypeError(f"unknown type {text!r}; known: {known}")
    return full


def add_parser(sub: Any, common_flags: argparse.ArgumentParser) -> None:
    rp = sub.add_parser("replay", parents=[common_flags], help="send stored events again")
    rp.add_argument("source", help="a file (JSON or JSON Lines), a directory, or - for stdin")
    rp.add_argument("--to", metavar="URL", help="POST to this URL instead of in-process")
    rp.add_argument("--mode", choices=["binary", "structured"], default="binary")
    rp.add_argument(
        "--type",
        action="append",
        metavar="TYPE",
        type=canonical_type,
        help="only this canonical type, e.g. artifact.pushed or dev.modelhooks.model.deleted "
        "(repeatable)",
    )
    rp.add_argument(
        "--since", type=utc_time, help="only events at or after (ISO 8601; no zone: UTC)"
    )
    rp.add_argument(
        "--until", type=utc_time, help="only events at or before (ISO 8601; no zone: UTC)"
    )
    rp.add_argument("--rate", type=float, default=0.0, help="events per second (0 = no limit)")
    rp.add_argument(
        "--raw",
        action="store_true",
        help="with --to: POST every stored document unchanged, so the server's translators "
        "and authentication run on it (filters do not apply)",
    )
    rp.add_argument(
        "--header",
        action="append",
        metavar="'NAME: VALUE'",
        help="an extra HTTP header with --to, e.g. 'Authorization: Bearer …' (repeatable)",
    )
    rp.add_argument("--dry-run", action="store_true", help="print what would be sent")
    rp.add_argument(
        "-v", "--verbose", action="store_true", help="with --dry-run: the target and each body"
    )
    rp.add_argument("--quiet", action="store_true", help="no progress bar")
    rp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    settings = common.settings(args)
    if args.raw:
        return _run_raw(args)
    layout = settings.layout.object_layout()
    events = list(
        select(
            to_events(read_documents(args.source), layout, settings.ingress.registry_host or None),
            types=frozenset(args.type or ()),
            since=args.since,
            until=args.until,
        )
    )
    if args.dry_run:
        target = args.to or "this process (in-process broker)"
        if args.verbose:
            print(f"target: {target}", file=sys.stderr)
        for e in events:
            if isinstance(e, ModelhooksError):
                print(json.dumps({"error": e.message}))
                continue
            shown: dict[str, Any] = {"id": e.id, "type": e.type, "subject": e.subject}
            shown["time"] = str(e.time)
            if args.verbose:
                shown["body"] = e.data.to_dict()
            print(json.dumps(shown))
        bad = sum(isinstance(e, ModelhooksError) for e in events)
        matched = "" if events else " (nothing matched the filters)"
        print(
            f"{len(events) - bad} events would be sent, {bad} documents cannot be "
            f"(reasons above) (dry run){matched}",
            file=sys.stderr,
        )
        return 1 if bad else 0
    if not events:
        print("nothing matched the filters: nothing sent", file=sys.stderr)
        return 0
    headers = _headers(args.header)
    send = (
        common.http_sender(args.to, args.mode, headers)
        if args.to
        else common.local_sender(settings)
    )
    with tqdm(total=len(events), unit="event", file=sys.stderr, disable=args.quiet) as bar:
        summary = replay(events, send, rate=args.rate, progress=lambda: bar.update())
    for text in summary.lines():
        print(text, file=sys.stderr)
    return 1 if summary.failed else 0


def _headers(values: list[str] | None) -> dict[str, str]:
    headers = {}
    for value in values or ():
        name, sep, text = value.partition(":")
        if not sep or not name.strip():
            raise BadRequest(f"--header {value!r} is not 'NAME: VALUE'")
        headers[name.strip()] = text.strip()
    return headers


def _run_raw(args: argparse.Namespace) -> int:
    """Every document as it was delivered, to `--to`: the server decodes and translates."""
    import requests
    from tqdm import tqdm

    if not args.to:
        raise BadRequest("--raw sends to a server: give --to URL")
    docs = list(read_documents(args.source))
    if args.dry_run:
        for where, doc in docs:
            print(json.dumps({"document": where, "content_type": content_type(doc)}))
        print(f"{len(docs)} documents would be sent unchanged (dry run)", file=sys.stderr)
        return 0
    extra = _headers(args.header)
    summary = Summary()
    with (
        requests.Session() as http,
        tqdm(total=len(docs), unit="doc", file=sys.stderr, disable=args.quiet) as bar,
    ):
        for where, doc in docs:
            headers = {"Content-Type": content_type(doc), **extra}
            resp = http.post(args.to, data=json.dumps(doc).encode(), headers=headers, timeout=60)
            summary.sent += 1
            if resp.status_code < 300:
                summary.succeeded += 1
            else:
                summary.failed += 1
                summary.reasons[f"{where}: {common.http_reason(resp.status_code, resp.text)}"] += 1
            bar.update()
    for text in summary.lines():
        print(text, file=sys.stderr)
    return 1 if summary.failed else 0
