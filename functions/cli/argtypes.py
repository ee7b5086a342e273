"""Argument types: a flag's value is checked where it is parsed, so a mistake is a usage
error (exit 2) naming the flag, before anything runs.

    p.add_argument("--keep", type=argtypes.count)            # 0, 1, 2, …
    p.add_argument("--rate", type=argtypes.non_negative)     # a finite float >= 0
    p.add_argument("--grace-hours", type=argtypes.hours)     # 0 to a million
    p.add_argument("--to", type=argtypes.http_url)           # http(s)://host[:port]/…

A flag's environment twin is read by `environment`, so its mistake names the variable.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit

from modelhooks.core.errors import ConfigError
from modelhooks.core.policy_files import HOURS_AT_MOST  # as a policy file's

__all__ = [
    "count",
    "environment",
    "header",
    "hours",
    "http_url",
    "non_negative",
    "oci_repository",
    "positive",
    "regex",
]

T = TypeVar("T")

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110)


def count(text: str) -> int:
    """A whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 or more")
    return value


def positive(text: str) -> int:
    """A whole number, 1 or more."""
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 1 or more")
    return value


def non_negative(text: str) -> float:
    """A finite number, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number, 0 or more")
    return value


def hours(text: str) -> float:
    """A number of hours, 0 to HOURS_AT_MOST."""
    value = non_negative(text)
    if value > HOURS_AT_MOST:
        raise argparse.ArgumentTypeError(f"{text!r}: at most {HOURS_AT_MOST:,} hours")
    return value


def http_url(text: str) -> str:
    """An http:// or https:// URL with a host (and a valid port, if any)."""
    parts = urlsplit(text)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http:// or https:// URL with a host, e.g. http://127.0.0.1:8080/"
        )
    if any(c.isspace() or ord(c) < 32 for c in text):
        raise argparse.ArgumentTypeError(f"{text!r}: a URL holds no spaces or control characters")
    if "@" in parts.netloc:  # user:password@: never sent, and printed in every failure
        shown = parts._replace(netloc="…@" + parts.netloc.rpartition("@")[2]).geturl()
        raise argparse.ArgumentTypeError(
            f"{shown!r}: credentials in a URL are not sent (replay takes them as "
            "--header 'Authorization: …')"
        )
    return text


def oci_repository(text: str) -> str:
    """An OCI repository, `oci://HOST/REPOSITORY` (the `oci://` may be left out)."""
    scheme, sep, rest = text.partition("://")
    if sep and scheme != "oci":
        raise argparse.ArgumentTypeError(
            f"{text!r}: not an OCI repository; give oci://HOST/REPOSITORY"
        )
    host, _, repository = (rest if sep else text).partition("/")
    if not host or not repository.strip("/"):
        raise argparse.ArgumentTypeError(
            f"{text!r} names no repository; give oci://HOST/REPOSITORY"
        )
    return text


def regex(text: str) -> str:
    """A regular expression (Python's syntax)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {exc}") from None
    return text


def header(text: str) -> tuple[str, str]:
    """An HTTP header, `NAME: VALUE`."""
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not _TOKEN.match(name) or any(c in value for c in "\r\n\0"):
        raise argparse.ArgumentTypeError(f"{text!r} is not 'NAME: VALUE'")
    return name, value


def environment(var: str, parse: Callable[[str], T], default: str) -> T:
    """A flag's environment twin `var` (else `default`) as `parse` reads it, read when the
    flag is not given: a mistake is a configuration error (exit 2) naming the variable and
    its value, as a setting's is, not the flag nobody passed (an argparse default taken
    from the environment was reported as `argument --concurrency: '0': …`)."""
    text = os.environ.get(var) or default
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"invalid setting {var}={text!r} (environment): {exc}") from None
