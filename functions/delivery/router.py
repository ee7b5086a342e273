"""Knative Triggers as the routing source of truth for the in-process broker (broker.py).

Triggers are read from `infra/knative/triggers.yaml` (the single source of truth, shipped in
the package as `modelhooks/triggers.yaml`); a Trigger names
its function with the label `modelhooks.dev/function`. Both filter styles are honoured:
`spec.filter.attributes` (exact) and `spec.filters` (exact, prefix, suffix, all, any, not);
as in Knative, `filters` wins when both are present.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelhooks.core.errors import ConfigError
from modelhooks.events.model import CanonicalEvent

__all__ = ["Trigger", "default_triggers", "load_triggers", "matches"]

FUNCTION_LABEL = "modelhooks.dev/function"


@dataclass(frozen=True)
class Trigger:
    name: str
    function: str
    attributes: Mapping[str, str]
    filters: tuple[Mapping[str, Any], ...] = ()

    def matches(self, attrs: Mapping[str, str]) -> bool:
        if self.filters:
            return all(matches(f, attrs) for f in self.filters)
        return all(v == "" or attrs.get(k) == v for k, v in self.attributes.items())

    def accepts(self, event: CanonicalEvent) -> bool:
        return self.matches(event.attributes())

    def reads(self) -> frozenset[str]:
        """The names of the attributes this Trigger's filter looks at: whether it matches
        depends on their values (or absence) alone."""
        if self.filters:
            return frozenset(n for f in self.filters for n in _reads(f))
        return frozenset(self.attributes)


def matches(expr: Mapping[str, Any], attrs: Mapping[str, str]) -> bool:
    """One Knative `filters` expression against CloudEvent attributes."""
    if len(expr) != 1:
        raise ConfigError(f"a filter expression has exactly one dialect key, got {list(expr)}")
    ((kind, arg),) = expr.items()
    if kind == "exact":
        return all(attrs.get(k) == v for k, v in arg.items())
    if kind == "prefix":
        return all(k in attrs and attrs[k].startswith(v) for k, v in arg.items())
    if kind == "suffix":
        return all(k in attrs and attrs[k].endswith(v) for k, v in arg.items())
    if kind == "all":
        return all(matches(e, attrs) for e in arg)
    if kind == "any":
        return any(matches(e, attrs) for e in arg)
    if kind == "not":
        return not matches(arg, attrs)
    raise ConfigError(f"unsupported trigger filter dialect {kind!r} (cesql is not supported)")


def _reads(expr: Any) -> Iterator[str]:
    """The attribute names a `filters` expression looks at (an invalid one names none: it
    fails when matched)."""
    if not isinstance(expr, Mapping):
        return
    for kind, arg in expr.items():
        if kind in ("exact", "prefix", "suffix") and isinstance(arg, Mapping):
            yield from (str(k) for k in arg)
        elif kind in ("all", "any") and isinstance(arg, list | tuple):
            for e in arg:
                yield from _reads(e)
        elif kind == "not":
            yield from _reads(arg)


def default_triggers() -> Path:
    """The Trigger YAML shipped with the package (`infra/knative` in the repository)."""
    from importlib.resources import files

    return Path(str(files("modelhooks") / "triggers.yaml"))


def load_triggers(location: Path | None = None) -> list[Trigger]:
    """Every Trigger that names a modelhooks function, in a YAML file or in every YAML file
    of a directory (default: the packaged `triggers.yaml`)."""
    import yaml

    location = location or default_triggers()
    if location.is_dir():
        paths = sorted(location.glob("*.yaml"))
    elif location.is_file():
        paths = [location]
    else:
        raise ConfigError(f"trigger file or directory {location} does not exist (router.triggers)")
    triggers = []
    for path in paths:
        try:
            triggers += _triggers(yaml.safe_load_all(path.read_text()))
        except (yaml.YAMLError, RecursionError, ValueError, AttributeError, TypeError) as exc:
            raise ConfigError(
                f"{path} holds no Knative Triggers (router.triggers): {_why(exc)}"
            ) from None
    if not triggers and location != default_triggers():
        raise ConfigError(
            f"no Trigger labelled {FUNCTION_LABEL} in {location} (router.triggers): "
            "nothing would run"
        )
    return triggers


def _triggers(stream: Iterator[Any]) -> list[Trigger]:
    """The file's Triggers that name a modelhooks function (AttributeError, TypeError for a
    Trigger of another shape)."""
    found = []
    for doc in _docs(stream):
        if doc.get("kind") != "Trigger":
            continue
        meta, spec = doc.get("metadata", {}), doc.get("spec", {})
        function = (meta.get("labels") or {}).get(FUNCTION_LABEL)
        if not function:
            continue
        found.append(
            Trigger(
                name=meta.get("name", "?"),
                function=function,
                attributes=dict((spec.get("filter") or {}).get("attributes") or {}),
                filters=tuple(spec.get("filters") or ()),
            )
        )
    return found


def _why(exc: BaseException) -> str:
    """Why a trigger file is refused: a file that is no YAML (a syntax error, nested past
    the parser's recursion, not UTF-8) or whose Triggers have another shape went through,
    `serve` exiting 70 ('a bug in modelhooks')."""
    if isinstance(exc, RecursionError):
        return "nested too deep"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, AttributeError | TypeError):
        return "a Trigger of another shape (metadata, spec, filter: mappings)"
    return " ".join(str(exc).split())


def _docs(stream: Iterator[Any]) -> Iterator[dict[str, Any]]:
    for doc in stream:
        if isinstance(doc, dict):
            yield doc
