"""The shape every policy file shares (`prune.policy_file`, `cleanup.policy_file`):

    policies:
      - <selector>: "glob"     # which repositories or models the entry covers
        <option>: value        # the options the file knows

`entries` walks it, refusing anything else with a ValueError naming the file and the entry;
each caller turns an entry's options into its policy.

>>> [(glob, opts) for _, glob, opts in entries("policies: [{models: 'b*', keep: 1}]", "p.yaml",
...     selector="models", options={"keep"})]
[('b*', {'keep': 1})]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

__all__ = ["HOURS_AT_MOST", "count", "entries", "flag", "hours", "strings"]

HOURS_AT_MOST = 1_000_000  # over a century: more is a typo (and past what a date can hold)


def entries(
    text: str, origin: str, *, selector: str, options: set[str]
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(where, glob, options) of each entry, in order; `where` names the entry for errors.
    Text that is no YAML (a syntax error, nesting past the parser's recursion, a value it
    cannot build: 2026-02-30, an integer of 5,000 digits) is a ValueError naming the file
    too: it was an internal error, and serve did not start."""
    import yaml

    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{origin}: not YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ValueError(f"{origin}: not YAML: nested too deep") from None
    except ValueError as exc:  # a value YAML reads but cannot build: 2026-02-30, 5,000 digits
        raise ValueError(f"{origin}: not YAML: a value that is none: {exc}") from None
    found = doc.get("policies") if isinstance(doc, dict) else None
    if not isinstance(found, list):
        raise ValueError(f"{origin}: expected `policies:` with a list of policies")
    for n, entry in enumerate(found):
        where = f"{origin}: policies[{n}]"
        if not isinstance(entry, dict) or not isinstance(entry.get(selector), str):
            raise ValueError(f"{where}: needs `{selector}` (a glob)")
        unknown = set(entry) - options - {selector}
        if unknown:
            raise ValueError(f"{where}: unknown keys {', '.join(sorted(map(str, unknown)))}")
        yield where, entry[selector], {k: v for k, v in entry.items() if k != selector}


def strings(key: str, value: object) -> tuple[str, ...]:
    """A list of strings (numbers read as their text), else a ValueError naming `key` (the
    caller names the entry): a bare string was read a character at a time (`protect:
    ^prod$` protected `^`, `p`, … and not prod)."""
    if not isinstance(value, list | tuple) or not all(
        isinstance(x, str | int | float) and not isinstance(x, bool) for x in value
    ):
        raise ValueError(f"{key}: a list of strings (in brackets), not {value!r}")
    return tuple(str(x) for x in value)


def flag(key: str, value: object) -> bool:
    """true or false (YAML's booleans), else a ValueError naming `key`: the quoted
    "false" was true."""
    if not isinstance(value, bool):
        raise ValueError(f"{key}: a boolean (true or false), not {value!r}")
    return value


def count(key: str, value: object) -> int:
    """A whole number, 0 or more (or its text, ASCII digits), else a ValueError naming
    `key`: `keep: true` was 1 and `keep: 2.5` 2, `keep: "²"` int()'s ValueError naming no
    key."""
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.isdigit() and len(text) <= 18:  # "²" is a digit to str
        value = int(text)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{key}: a whole number, 0 or more, not {value!r}")
    return value


def hours(key: str, value: object) -> timedelta:
    """A number of hours, 0 to HOURS_AT_MOST (or its text: YAML 1.1 reads `1e3` as one), as
    a timedelta (the CLI's --grace-hours' rule), else a ValueError naming `key`: `.inf` or
    `1e12` raised OverflowError (serve exited 70, 'a bug'), `true` was an hour and a
    negative number counted every push as old enough."""
    number = float("nan")
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        with contextlib.suppress(ValueError, OverflowError):
            number = float(value)
    if 0 <= number <= HOURS_AT_MOST:  # nan and inf fail
        return timedelta(hours=number)
    raise ValueError(f"{key}: a number of hours, 0 to {HOURS_AT_MOST:,}, not {value!r}")
