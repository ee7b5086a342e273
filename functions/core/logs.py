"""Structured logs: one JSON object per line, in the shape Cloud Logging understands
(`severity`, `message`, plus fields that become `jsonPayload`)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["configure", "enabled", "log"]

_LOGGER = logging.getLogger("modelhooks")
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    _encode = json.JSONEncoder(default=str).encode  # json.dumps(default=…) makes one a call

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "severity": record.levelname,
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "logger": record.name,
        }
        doc.update({k: v for k, v in vars(record).items() if k not in _RESERVED})
        if record.exc_info:
            doc["stack_trace"] = self.formatException(record.exc_info)
        return self._encode(doc)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at the time (it may be replaced after start-up)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


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
    exc = (type(exc_info), exc_info, exc_info.__traceback__) if exc_info else None
    # Logger.log without its caller lookup (a walk up the stack on every line), which no
    # field of ours uses: a line per delivery is on the hot path
    record = _LOGGER.makeRecord(_LOGGER.name, level, "", 0, message, (), exc, extra=extra)
    _LOGGER.handle(record)
