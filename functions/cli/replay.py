"""`modelhooks replay`: send stored events again — to the in-process functions or a URL.

A source is a file (one JSON document, or JSON Lines), a directory of such files, or `-`
(stdin). Each document is an HTTP body as delivered (a structured CloudEvent, a Pub/Sub
push envelope, a native webhook body); it is translated to canonical events first, so
filters apply to canonical types and times. Replaying twice changes nothing the second
time: canonical ids are derived from upstream ids and every effect is idempotent.

A document that cannot be read or translated is reported and the rest is sent. Exit status:
0 every event succeeded, 2 some were refused (bad input, or a Model's version or deletion a
function refused for good and told as a reply: sending them again will not help),
3 some failed transiently or the target did not answer (run it again), 130 interrupted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from modelhooks.cli import argtypes, common
from modelhooks.core.errors import BadRequest, ModelhooksError, PartlyBad, Transient
from modelhooks.events.ingress import decode
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import CanonicalEvent
from modelhooks.events.sources import translate

__all__ = ["Summary", "add_parser", "read_documents", "replay", "select"]

T = TypeVar("T")
MAX_FILE_BYTES = 1 << 30  # a stored file is read whole (as a delivery's body is)
MAX_DOCUMENT_BYTES = 64 << 20  # one JSON document's; a longer text is JSON Lines
MAX_BAD_LINES = 100  # lines that are not JSON before any that is: not JSON Lines
MAX_SKIP_REASONS = 10  # shown in the summary (each names its model: as many as events)


@dataclass
class Summary:
    sent: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    transient: int = 0  # of the failed: those worth sending again
    stopped: str = ""  # why the rest was not sent (the target did not answer)
    reasons: Counter[str] = field(default_factory=Counter)
    skips: Counter[str] = field(default_factory=Counter)  # why each skipped one was

    def line(self) -> str:
        return (
            f"sent {self.sent}, succeeded {self.succeeded}, failed {self.failed}, "
            f"skipped {self.skipped}"
        )

    def lines(self) -> list[str]:
        out = [self.line()]
        out += [f"  {n} x {reason}" for reason, n in self.reasons.most_common()]
        shown = self.skips.most_common(MAX_SKIP_REASONS)
        out += [f"  {n} x {reason}" for reason, n in shown]
        if len(self.skips) > len(shown):
            out.append(f"  … skipped for {len(self.skips) - len(shown)} other reasons")
        if self.stopped:
            out.append(f"stopped: {self.stopped}; the rest was not sent (replaying is safe)")
        return out

    def exit_status(self) -> int:
        """3 when sending again may help, 2 when something was refused, else 0."""
        if self.stopped or self.transient:
            return 3
        return 2 if self.failed else 0


def read_documents(source: str) -> Iterator[tuple[str, Any]]:
    """(where, JSON document) for every document in the source, as they are read; the
    document is a BadRequest for a file or line that cannot be read (the rest is still
    read). Standard input is read as at most MAX_FILE_BYTES (`replay - < /dev/zero` was read
    without end)."""
    if source == "-":
        yield from _stdin(sys.stdin.read(MAX_FILE_BYTES + 1))
        return
    path = Path(source)
    if path.is_dir():
        files = _files(path)
    elif path.is_file():
        files = [path]
    else:
        raise BadRequest(f"replay source {source!r} is not a file, a directory or '-'")
    for f in files:
        if isinstance(f, BadRequest):
            yield str(f.details.get("path", "")), f
            continue
        try:
            if f.stat().st_size > MAX_FILE_BYTES:
                yield str(f), BadRequest(f"{f}: over {MAX_FILE_BYTES} bytes: split it")
                continue
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            yield str(f), BadRequest(f"{f}: cannot be read: {getattr(exc, 'strerror', exc)}")
            continue
        yield from _parse(str(f), text)


def _stdin(text: str) -> Iterator[tuple[str, Any]]:
    if len(text) > MAX_FILE_BYTES:
        yield "<stdin>", BadRequest(f"<stdin>: over {MAX_FILE_BYTES} bytes: split it")
        return
    yield from _parse("<stdin>", text)


def _rereadable(source: str) -> Callable[[], Iterator[tuple[str, Any]]]:
    """The source's documents, read again at each call (standard input once, its text kept):
    counted first, then sent, none of them held."""
    if source != "-":
        return lambda: read_documents(source)
    text = sys.stdin.read(MAX_FILE_BYTES + 1)
    return lambda: _stdin(text)


def _files(folder: Path) -> list[Path | BadRequest]:
    """The .json and .jsonl regular files below `folder` (a FIFO or a link to /dev/zero
    never ends), in order; a folder that cannot be listed (nested past PATH_MAX, unreadable)
    is a BadRequest in its place, and the rest is still read: rglob raised, and nothing was
    sent."""
    found: list[tuple[Path, Path | BadRequest]] = []

    def unreadable(exc: OSError) -> None:
        where = Path(str(exc.filename))
        error = BadRequest(f"{where}: cannot be read: {exc.strerror}", path=str(where))
        found.append((where, error))

    for parent, _, names in os.walk(folder, onerror=unreadable):
        for name in names:
            file = Path(parent, name)
            try:
                if file.suffix in (".json", ".jsonl") and file.is_file():
                    found.append((file, file))
            except OSError as exc:  # its path past PATH_MAX
                unreadable(exc)
    return [item for _, item in sorted(found, key=lambda pair: pair[0])]


def _parse(where: str, text: str) -> Iterator[tuple[str, Any]]:
    """One JSON document, else JSON Lines (a line that is not JSON is reported; a file
    with no JSON line at all is reported once). Messages pulled from a Pub/Sub subscription
    (`gcloud pubsub subscriptions pull --format=json`, a dead-letter subscription's) are
    each the push that delivered them. A byte-order mark (a Windows editor's) is no content;
    lines end at '\n' alone (a JSON string may hold U+2028 or U+0085, which splitlines cuts
    at). JSON nested past the parser's recursion is a document that cannot be read. A text
    over MAX_DOCUMENT_BYTES is JSON Lines only, each line parsed as it is reached: a
    stored file of 1 GiB was held whole as parsed documents (about 11 times its size)."""
    text = text.removeprefix("\ufeff")
    whole: Exception | None = None
    if len(text) <= MAX_DOCUMENT_BYTES:
        try:
            doc = json.loads(text)
        except (
            ValueError,
            RecursionError,
        ) as exc:  # JSONDecodeError, a number too long, '[' * 10**5
            whole = exc
        else:
            if _pulled(doc):
                for i, item in enumerate(doc):
                    yield f"{where}[{i}]", _as_push(item["message"])
            else:
                yield where, doc
            return
    unread: list[tuple[str, Any]] = []  # the bad lines before the first good one
    good = False
    for n, line in _lines(text):
        try:
            if len(line) > MAX_DOCUMENT_BYTES:  # a JSON array of a million events, on one line
                raise ValueError(f"over {MAX_DOCUMENT_BYTES} bytes: store it as JSON Lines")
            parsed: tuple[str, Any] = (f"{where}:{n}", json.loads(line))
        except (ValueError, RecursionError) as exc:
            parsed = (f"{where}:{n}", BadRequest(f"{where}:{n} is not JSON: {exc}"))
            if not good:
                unread.append(parsed)
                if len(unread) < MAX_BAD_LINES:
                    continue
                break  # no JSON line among the first: not JSON Lines
        if not good and not isinstance(parsed[1], BadRequest):
            good = True
            yield from unread
            unread = []
        yield parsed
    if unread:
        reason = whole or (
            f"over {MAX_DOCUMENT_BYTES} bytes as one document (store its events as JSON "
            "Lines), and no line of it is JSON"
        )
        yield where, BadRequest(f"{where} is neither JSON nor JSON Lines: {reason}")


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(number, line) of each line of `text` that is not blank, without a list of them."""
    start = 0
    for n in itertools.count(1):
        end = text.find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
        if line.strip():
            yield n, line
        if end < 0:
            return
        start = end + 1


def _pulled(doc: Any) -> bool:
    """Pub/Sub pulled messages: `[{"ackId": …, "message": {…}}, …]`."""
    return (
        isinstance(doc, list)
        and bool(doc)
        and all(
            isinstance(d, dict) and "ackId" in d and isinstance(d.get("message"), dict) for d in doc
        )
    )


def _as_push(message: dict[str, Any]) -> dict[str, Any]:
    """A pulled message as Pub/Sub pushes it (a dead letter names the subscription it came
    through)."""
    attributes = message.get("attributes")
    source = isinstance(attributes, dict) and attributes.get(
        "CloudPubSubDeadLetterSourceSubscription"
    )
    return {"message": message, "subscription": source if isinstance(source, str) else ""}


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
        if isinstance(doc, BadRequest):  # could not be read
            yield doc
            continue
        ctype = content_type(doc)
        try:
            inbounds = decode({"Content-Type": ctype}, json.dumps(doc).encode(), max_bytes=1 << 30)
        except PartlyBad as exc:  # a bad one (a batch member, a record) is reported alone
            inbounds = exc.good
            yield BadRequest(f"{where}: {exc.message}")
        except ModelhooksError as exc:
            yield BadRequest(f"{where}: {exc.message}")
            continue
        for inbound in inbounds:
            try:
                yield from translate(inbound, layout=layout, registry_host=registry_host)
            except PartlyBad as exc:
                yield from exc.good
                yield BadRequest(f"{where}: {exc.message}")
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
    events: Iterable[T | BadRequest],
    send: Callable[[T], tuple[int, str]],
    *,
    rate: float = 0.0,
    progress: Callable[[], object] = lambda: None,
    summary: Summary | None = None,
) -> Summary:
    """Send each event (at most `rate` per second); `send` says (HTTP-like status,
    reason), or raises Transient when the target did not answer (then the rest is not
    sent). Documents that did not translate count as failed, with their reason; so does a
    2xx with a reason: a refusal for good told as a reply (common.told_refusals), unless
    the reason says every function skipped it (common.SKIPPED): then it counts as skipped,
    nothing done, and nothing to send again."""
    summary = Summary() if summary is None else summary
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
        try:
            status, reason = send(event)
        except Transient as exc:
            summary.stopped = exc.message
            break
        summary.sent += 1
        if status < 300 and not reason:
            summary.succeeded += 1
        elif status < 300 and reason.startswith(common.SKIPPED):
            summary.skipped += 1
            summary.skips[reason] += 1
        else:
            summary.failed += 1
            summary.transient += status >= 500 or status == 429
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
    rp.add_argument(
        "--to", metavar="URL", type=argtypes.http_url, help="POST here instead of in-process"
    )
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
    rp.add_argument(
        "--rate", type=argtypes.non_negative, default=0.0, help="events per second (0 = no limit)"
    )
    rp.add_argument(
        "--raw",
        action="store_true",
        help="with --to: POST every stored document unchanged, so the server's translators "
        "and authentication run on it (filters do not apply)",
    )
    rp.add_argument(
        "--header",
        action="append",
        type=argtypes.header,
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
    settings = common.settings(args)
    if args.raw:
        return _run_raw(args)
    layout = settings.layout.object_layout()
    documents = _rereadable(args.source)

    def events() -> Iterator[CanonicalEvent | BadRequest]:
        return select(
            to_events(documents(), layout, settings.ingress.registry_host or None),
            types=frozenset(args.type or ()),
            since=args.since,
            until=args.until,
        )

    if args.dry_run:
        target = args.to or "this process (in-process broker)"
        if args.verbose:
            print(f"target: {target}", file=sys.stderr)
        total = bad = 0
        for e in events():
            total += 1
            if isinstance(e, ModelhooksError):
                bad += 1
                print(json.dumps({"error": e.message}))
                continue
            shown: dict[str, Any] = {"id": e.id, "type": e.type, "subject": e.subject}
            shown["time"] = e.time.isoformat() if e.time else None
            if args.verbose:
                shown["body"] = e.data.to_dict()
            print(json.dumps(shown))
        matched = "" if total else f" ({_nothing(args, documents)})"
        print(
            f"{total - bad} events would be sent, {bad} documents cannot be "
            f"(reasons above) (dry run){matched}",
            file=sys.stderr,
        )
        return 2 if bad else 0
    total = sum(1 for _ in events())  # read twice, held never: the progress bar's total
    if not total:
        print(f"{_nothing(args, documents)}: nothing sent", file=sys.stderr)
        return 0
    send = (
        common.http_sender(args.to, args.mode, dict(args.header or ()))
        if args.to
        else common.local_sender(settings)
    )
    return _send_all(events(), total, send, args, unit="event")


def _nothing(args: argparse.Namespace, documents: Callable[[], Iterable[Any]]) -> str:
    """Why a source gave no event to send: no document in it at all (an empty folder, or
    the wrong one: only .json and .jsonl files are read), or none translating to an event
    (an upstream change no function acts on, S3's test event), or the filters."""
    read = sum(1 for _ in documents())
    if not read:
        return (
            f"no stored events in {args.source} (a file of JSON or JSON Lines, a folder "
            "of .json and .jsonl files, or -)"
        )
    if args.type or args.since or args.until:
        return f"{read} documents read, none matched the filters"
    return f"{read} documents read, none is an event to send (changes no function acts on)"


def _send_all(
    items: Iterable[Any], total: int, send: Callable[[Any], tuple[int, str]], args: Any, unit: str
) -> int:
    """Send every item with a progress bar; the summary, or on Ctrl-C what was sent."""
    from tqdm import tqdm

    summary = Summary()

    def done() -> str:
        return f"{summary.line()} of {total} {unit}s; replaying again is safe"

    with (
        common.interruptible(done),
        tqdm(total=total, unit=unit, file=sys.stderr, disable=args.quiet) as bar,
    ):
        replay(items, send, rate=args.rate, progress=bar.update, summary=summary)
    for text in summary.lines():
        print(text, file=sys.stderr)
    return summary.exit_status()


def _run_raw(args: argparse.Namespace) -> int:
    """Every document as it was delivered, to `--to`: the server decodes and translates."""
    if not args.to:
        raise BadRequest("--raw sends to a server: give --to URL")
    documents = _rereadable(args.source)
    if args.dry_run:
        total = 0
        for where, doc in documents():
            total += 1
            shown = (
                {"document": where, "error": doc.message}
                if isinstance(doc, BadRequest)
                else {"document": where, "content_type": content_type(doc)}
            )
            print(json.dumps(shown))
        print(f"{total} documents would be sent unchanged (dry run)", file=sys.stderr)
        return 0
    extra = dict(args.header or ())
    http = common.http_pool(args.to)

    def send(item: tuple[str, Any]) -> tuple[int, str]:
        where, doc = item
        headers = {"Content-Type": content_type(doc), **extra}
        status, reason = common.post(http, args.to, json.dumps(doc).encode(), headers)
        if not reason or reason.startswith(common.SKIPPED):  # done, or skipped: as is
            return status, reason
        return status, f"{where}: {reason}"  # which document was refused

    total = sum(1 for _ in documents())
    items = (doc if isinstance(doc, BadRequest) else (where, doc) for where, doc in documents())
    with http:
        return _send_all(items, total, send, args, unit="document")
