"""JSON from untrusted deliveries, with limits: every violation is a BadRequest naming where.

- nesting deeper than MAX_DEPTH (arrays and objects),
- integers longer than MAX_INT_DIGITS digits, NaN and ±Infinity,
- keys longer than MAX_KEY_LENGTH, or holding control characters (NUL included),
- strings anywhere holding NUL or a lone surrogate (which no store, log or encoder keeps).

>>> loads(b'{"a": [1, "x"]}', "body")
{'a': [1, 'x']}
>>> loads(b'{"a\\\\u0000": 1}', "body")
Traceback (most recent call last):
...
modelhooks.events.errors.BadRequest: body: key 'a\\x00' holds a control character
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from modelhooks.events.errors import BadRequest

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_KEY_LENGTH",
    "check_text",
    "loads",
    "loads_or_raw",
]

MAX_DEPTH = 32
MAX_INT_DIGITS = 40
# a Kubernetes qualified name (a 253-character prefix, "/", a 63-character name: 317) as an
# object's managedFields name it: a label or annotation f:<key> (319), a finalizer v:"<name>"
# (321), a condition of the CRD's longest type (316) k:{"type":"<type>"} (329)
MAX_KEY_LENGTH = 330


def _text_bad(value: str) -> bool:
    """NUL or a lone surrogate."""
    if value.isascii():  # most text: a flag the string carries, no scan
        return "\x00" in value
    return _patterns()[0].search(value) is not None


def _key_bad(value: str) -> bool:
    """A control character (NUL included, and DEL) or a lone surrogate."""
    if value.isascii():  # an ASCII character is printable unless it is one of those
        return not value.isprintable()
    return _patterns()[1].search(value) is not None


@cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Compiled on the first text that is not ASCII: a class reaching the surrogates is
    compiled to a table of the whole plane (~0.7 ms each, a cold start's first event)."""
    return re.compile(r"[\x00\ud800-\udfff]"), re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits is over the limit of {MAX_INT_DIGITS}")
    return int(text)


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(raw: bytes | str, where: str) -> Any:
    """Parse and check; BadRequest (naming `where` and the path) for anything unreadable."""
    try:
        value = _parse(raw)
    except RecursionError:
        raise BadRequest(f"{where}: JSON nested too deeply", field=where) from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise BadRequest(f"{where} is not valid JSON: {exc}", field=where) from None
    _check(value, where, 0)
    return value


def loads_or_raw(raw: bytes, where: str) -> Any:
    """JSON checked as `loads` does, or the bytes themselves when they are not JSON at all
    (a Pub/Sub message's data may be anything)."""
    try:
        value = _parse(raw)
    except RecursionError:
        raise BadRequest(f"{where}: JSON nested too deeply", field=where) from None
    except (UnicodeDecodeError, ValueError):
        return raw
    _check(value, where, 0)
    return value


def check_text(value: str, where: str) -> str:
    """A string from a header or attribute: no NUL, no lone surrogate, no control character."""
    if _key_bad(value):
        raise BadRequest(f"{where}: holds a control character or a lone surrogate", field=where)
    return value


# json.loads with these hooks, without making a decoder per call as json.loads does
_DECODER = json.JSONDecoder(parse_int=_int, parse_constant=_constant)


def _parse(raw: bytes | str) -> Any:
    """`json.loads(raw, parse_int=_int, parse_constant=_constant)`, its errors included."""
    if isinstance(raw, bytes | bytearray):
        raw = raw.decode(json.detect_encoding(raw), "surrogatepass")
    elif raw.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
    return _DECODER.decode(raw)


def _check(value: Any, path: str, depth: int) -> None:
    if isinstance(value, str):
        if _text_bad(value):
            raise BadRequest(f"{path}: holds NUL or a lone surrogate", field=path)
    elif isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise BadRequest(f"{path}: nested deeper than {MAX_DEPTH} levels", field=path)
        for key, item in value.items():
            if len(key) > MAX_KEY_LENGTH:
                raise BadRequest(
                    f"{path}: a key of {len(key)} characters is over {MAX_KEY_LENGTH}", field=path
                )
            if _key_bad(key):
                raise BadRequest(f"{path}: key {key!r} holds a control character", field=path)
            if isinstance(item, str):  # inline: most values are strings
                if _text_bad(item):
                    _check(item, f"{path}.{key}", depth + 1)
            elif isinstance(item, dict | list):  # numbers, booleans, null: nothing to see
                _check(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, list):
        if depth >= MAX_DEPTH:
            raise BadRequest(f"{path}: nested deeper than {MAX_DEPTH} levels", field=path)
        for i, item in enumerate(value):
            if isinstance(item, dict | list | str):
                _check(item, f"{path}[{i}]", depth + 1)
