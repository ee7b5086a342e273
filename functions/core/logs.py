"""Structured logs: one JSON object per line, in the shape Cloud Logging understands
(`severity`, `message`, plus fields that become `jsonPayload`)."""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

__all__ = ["configure", "enabled", "log"]

_LOGGER = logging.getLogger("modelhooks")
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


_encode = json.JSONEncoder(default=str).encode  # json.dumps(default=…) makes one a call


def _line(severity: str, message: str, created: float, logger: str, fields: dict[str, Any]) -> str:
    doc: dict[str, Any] = {
        "severity": severity,
        "message": message,
        "time": datetime.fromtimestamp(created, UTC).isoformat().replace("+00:00", "Z"),
        "logger": logger,
    }
    doc.update(fields)
    return _encode(doc)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in vars(record).items() if k not in _RESERVED}
        if record.exc_info:
            fields["stack_trace"] = self.formatException(record.exc_info)
        return _line(record.levelname, record.getMessage(), record.created, record.name, fields)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at the time (it may be replaced after start-up)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)

    def write(self, line: str) -> None:
        """`line` as emit writes a formatted record's: whole, then flushed."""
        with self.lock:  # type: ignore[union-attr]
            stream = self.stream = sys.stderr
            try:
                stream.write(line + self.terminator)
                stream.flush()
            except Exception:  # as emit: a broken stream never fails the caller
                self.handleError(logging.makeLogRecord({"msg": line}))


def _plain(handler: logging.Handler, level: int) -> bool:
    """Whether `handler`, the logger's only one, writes every line at `level` as our
    formatter makes it: nothing filters or reformats it."""
    return (
        level >= handler.level
        and not _LOGGER.disabled
        and not _LOGGER.propagate  # no handler above it to hand the record to
        and not handler.filters
        and not _LOGGER.filters
        and type(handler.formatter) is JsonFormatter
    )


def configure(level: str = "INFO") -> None:
    """Send modelhooks logs to stderr as JSON lines (idempotent)."""
    if not any(isinstance(h.formatter, JsonFormatter) for h in _LOGGER.handlers):
        handler = _Stderr()
        handler.setFormatter(JsonFormatter())
        _LOGGER.addHandler(handler)
        _LOGGER.propagate = False
    _LOGGER.setLevel(level)


def enabled(level: int) -> bool:
    """Whether a line at `level` is written: a caller with fields to compute asks first."""
    return _LOGGER.isEnabledFor(level)


def log(
    level: int, message: str, /, *, exc_info: BaseException | None = None, **fields: Any
) -> None:
    """One JSON line: `message` plus `fields` (a field named like a LogRecord attribute gets
    a trailing underscore instead of breaking the record); `exc_info` adds the traceback."""
    if not _LOGGER.isEnabledFor(level):
        return
    extra = {f"{k}_" if k in _RESERVED else k: v for k, v in fields.items()}
    handler = _LOGGER.handlers[0] if len(_LOGGER.handlers) == 1 else None
    if exc_info is None and type(handler) is _Stderr and _plain(handler, level):
        # the line its handler would write, without a LogRecord and the logging machinery
        # around it (half a line's CPU; one per delivery is on the hot path)
        handler.write(_line(logging.getLevelName(level), message, time.time(), _LOGGER.name, extra))
        return
    exc = (type(exc_info), exc_info, exc_info.__traceback__) if exc_info else None
    # Logger.log without its caller lookup (a walk up the stack on every line), which no
    # field of ours uses: a line per delivery is on the hot path
    record = _LOGGER.makeRecord(_LOGGER.name, level, "", 0, message, (), exc, extra=extra)
    _LOGGER.handle(record)
