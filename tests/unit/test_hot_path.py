"""The per-delivery shortcuts of the register path say exactly what the long ways said: the
log line written without a LogRecord, the headers read from the WSGI environ, the body read
to its announced length, JSON parsed by one decoder made once."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given
from hypothesis import strategies as st
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request

from modelhooks.core import logs
from modelhooks.delivery.http import headers_of, read_body
from modelhooks.events import safe_json
from modelhooks.events.errors import BadRequest, PayloadTooLarge
from modelhooks.events.safe_json import loads, loads_or_raw


@pytest.fixture
def stderr(capsys: pytest.CaptureFixture[str]) -> Callable[[], str]:
    logs.configure("INFO")
    return lambda: capsys.readouterr().err


@contextmanager
def alone() -> Iterator[logging.Handler]:
    """Our handler alone on the logger, as in a served process (pytest adds its capturing
    ones to it while a test runs)."""
    handlers = logs._LOGGER.handlers[:]
    (ours,) = [h for h in handlers if isinstance(h.formatter, logs.JsonFormatter)]
    logs._LOGGER.handlers[:] = [ours]
    try:
        yield ours
    finally:
        logs._LOGGER.handlers[:] = handlers


def _lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


FIELDS = {"event_id": "e1", "status": 200, "duration_ms": 0.5, "name": "a LogRecord name"}


def test_a_log_line_is_the_line_the_formatter_writes(stderr: Callable[[], str]) -> None:
    with alone() as handler:
        logs.log(logging.INFO, "register ok", **FIELDS)  # the short way
        handler.addFilter(lambda record: True)  # anything else takes the logging machinery
        try:
            logs.log(logging.INFO, "register ok", **FIELDS)
        finally:
            handler.filters.clear()
    short, long = _lines(stderr())
    assert list(short) == list(long)  # same fields, same order
    assert {**short, "time": ""} == {**long, "time": ""}
    assert short["name_"] == "a LogRecord name" and short["severity"] == "INFO"
    assert str(short["time"]).endswith("Z")


def test_a_filter_on_the_handler_still_filters(stderr: Callable[[], str]) -> None:
    with alone() as handler:
        handler.addFilter(lambda record: False)
        try:
            logs.log(logging.INFO, "dropped", event_id="e1")
        finally:
            handler.filters.clear()
    assert stderr() == ""


def test_a_line_below_the_level_is_not_written(stderr: Callable[[], str]) -> None:
    logs.configure("WARNING")
    try:
        with alone():
            logs.log(logging.INFO, "quiet", event_id="e1")
            logs.log(logging.WARNING, "loud", event_id="e2")
    finally:
        logs.configure("INFO")
    assert [line["message"] for line in _lines(stderr())] == ["loud"]


def test_a_logger_set_to_propagate_still_hands_its_lines_up(stderr: Callable[[], str]) -> None:
    """An embedding application that lets our lines propagate gets them at its own handler."""
    records: list[logging.LogRecord] = []

    class Above(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    above = Above()
    root = logging.getLogger()
    root.addHandler(above)
    try:
        with alone():
            logs._LOGGER.propagate = True
            try:
                logs.log(logging.WARNING, "seen above", event_id="e1")
            finally:
                logs._LOGGER.propagate = False
    finally:
        root.removeHandler(above)
    assert [r.getMessage() for r in records] == ["seen above"]
    assert [line["message"] for line in _lines(stderr())] == ["seen above"]


def test_headers_from_the_environ_are_werkzeugs() -> None:
    environ = EnvironBuilder(
        method="POST",
        data=b"{}",
        content_type="application/json",
        headers={"ce-id": "1", "Ce-Source": "/a b", "X-Goog-Pubsub-Message-Id": "m"},
    ).get_environ()
    environ["HTTP_CONTENT_TYPE"] = "text/plain"  # as werkzeug, CONTENT_TYPE is the one
    request = Request(environ)
    assert headers_of(environ) == dict(request.headers)
    assert headers_of(environ)["Ce-Id"] == "1"
    assert headers_of(environ)["Content-Type"] == "application/json"


class _Trickle(io.RawIOBase):
    """A request body that comes 3 bytes per read."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(3, len(buffer), len(self.data))
        buffer[:n], self.data = self.data[:n], self.data[n:]
        return n


@pytest.mark.parametrize("length", [True, False])
def test_the_body_is_read_whole_however_it_trickles(length: bool) -> None:
    body = b'{"model": "m", "version": "1"}'
    environ = EnvironBuilder(method="POST", data=body).get_environ()
    environ["wsgi.input"] = _Trickle(body)
    if not length:
        del environ["CONTENT_LENGTH"]
        environ["wsgi.input_terminated"] = True
    assert read_body(Request(environ), 1 << 20) == body
    environ["wsgi.input"] = _Trickle(body)
    if length:  # refused before reading
        with pytest.raises(PayloadTooLarge):
            read_body(Request(environ), 10)
    else:  # read one byte past the limit, no further
        assert read_body(Request(environ), 10) == body[:11]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": [1, "x", {"b": null}]}',
        '{"a": 1}'.encode("utf-16"),
        b"\xef\xbb\xbf{}",
        "\ufeff{}",
        b'{"a": "\\ud800"}',
        b"[1, 2",
        b"NaN",
        b"1" * 41,
        b"\xff",
    ],
)
def test_json_is_parsed_as_json_loads_does(raw: bytes | str) -> None:
    def hooked(value: bytes | str) -> object:
        def too_long(text: str) -> int:
            if len(text) > 40:
                raise ValueError("too long")
            return int(text)

        def constant(name: str) -> object:
            raise ValueError(name)

        return json.loads(value, parse_int=too_long, parse_constant=constant)

    try:
        expected: object = hooked(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        expected = type(exc)
    try:
        got: object = loads(raw, "body")
    except BadRequest:
        got = "refused"
    if isinstance(expected, type):
        assert got == "refused" and loads_or_raw(raw, "x") == raw  # type: ignore[arg-type]
    elif expected == {"a": "\ud800"}:
        assert got == "refused"  # a lone surrogate, refused by the checks after parsing
    else:
        assert got == expected


_CHARACTERS = st.one_of(
    st.characters(max_codepoint=0x7F),  # ASCII, control characters included
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=()),
    st.characters(exclude_categories=()),
)


@given(st.text(_CHARACTERS, max_size=12))
def test_text_and_keys_are_refused_as_their_character_classes_say(text: str) -> None:
    """The checks' shortcut for ASCII text says what the character classes say."""
    assert safe_json._text_bad(text) == bool(re.search(r"[\x00\ud800-\udfff]", text))
    assert safe_json._key_bad(text) == bool(re.search(r"[\x00-\x1f\x7f\ud800-\udfff]", text))


def test_a_reply_in_binary_mode_encodes_only_the_attributes_that_need_it() -> None:
    from modelhooks.delivery.encoding import binary
    from modelhooks.events.model import CanonicalEvent, ModelDeleted

    reply = CanonicalEvent(
        id="e1/deleted-before",
        source="modelhooks/register",
        type=ModelDeleted.TYPE,
        data=ModelDeleted(name="m"),
        subject='models/a b "é" 100%',
    )
    headers = binary(reply).headers
    assert headers["ce-subject"] == "models/a%20b%20%22%C3%A9%22%20100%25"
    assert headers["ce-id"] == "e1/deleted-before" and headers["ce-source"] == reply.source
    assert list(headers) == [
        "Content-Type",
        "ce-specversion",
        "ce-id",
        "ce-source",
        "ce-type",
        "ce-dataschema",
        "ce-subject",
    ]
    plain = binary(reply.replace(subject="models/a-b")).headers
    assert plain["ce-subject"] == "models/a-b"
