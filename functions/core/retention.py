"""Tag retention: which tags of a repository to keep and which to delete, and why.

A policy groups tags into streams (glob patterns, e.g. `v*`, `nightly-*`; a tag in no stream
is kept), keeps the `keep` newest of each stream — by semantic version when every tag of
the stream is one, else by push time; protected tags count among them — and protects,
whatever the rest says:
- tags matching a `protect` regex (`latest`, release tags, a 40-hex git SHA, …);
- tags pushed within `grace` (and tags whose push time is unknown);
- tags naming a digest in use (a live Model or registry version references it) or a
  digest that a kept tag names too.

`plan` is pure: the same inputs give the same plan, and applying a plan, then planning
again, deletes nothing more.

>>> from datetime import UTC
>>> old = datetime(2026, 1, 1, tzinfo=UTC)
>>> tags = [Tag("v1.0.0", "a", old), Tag("v1.2.0", "b", old), Tag("latest", "b", old)]
>>> [(d.tag, d.reason) for d in plan(tags, Policy(streams=("v*",), keep=1)).delete]
[('v1.0.0', 'beyond the 1 newest of stream v*')]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from modelhooks.core.errors import NotFound

if TYPE_CHECKING:
    from modelhooks.core.ports import OciRegistry

__all__ = ["CREATED", "Decision", "Plan", "Policies", "Policy", "Tag", "history", "plan"]

CREATED = "org.opencontainers.image.created"  # the manifest annotation of the push time

_SEMVER = re.compile(
    r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


@dataclass(frozen=True)
class Tag:
    name: str
    digest: str
    pushed_at: datetime | None = None  # None: unknown (the registry does not say)


@dataclass(frozen=True)
class Policy:
    streams: tuple[str, ...] = ()  # glob patterns; a tag in none of them is kept
    keep: int = 10  # the newest N of each stream
    protect: tuple[str, ...] = (r"^latest$",)  # regexes (full match)
    grace: timedelta = timedelta(days=1)

    def __post_init__(self) -> None:
        if self.keep < 0:
            raise ValueError("keep: must be 0 or more")
        for pattern in self.protect:
            re.compile(pattern)  # a bad regex fails here, naming itself


@dataclass(frozen=True)
class Decision:
    tag: str
    digest: str
    reason: str


@dataclass(frozen=True)
class Plan:
    keep: tuple[Decision, ...] = ()
    delete: tuple[Decision, ...] = ()


def _version(name: str) -> tuple[int, int, int, int, str] | None:
    m = _SEMVER.match(name)
    if not m:
        return None
    major, minor, patch, pre = int(m[1]), int(m[2]), int(m[3]), m[4] or ""
    return (major, minor, patch, 0 if pre else 1, pre)  # a release sorts after its pre-releases


def _newest_first(tags: Sequence[Tag]) -> list[Tag]:
    versions = [_version(t.name) for t in tags]
    if tags and all(v is not None for v in versions):
        ranked = {t.name: v for t, v in zip(tags, versions, strict=True)}
        return sorted(tags, key=lambda t: ranked[t.name], reverse=True)  # type: ignore[arg-type, return-value]

    def pushed(t: Tag) -> float:  # an unknown push time counts as the newest (it is kept)
        return t.pushed_at.timestamp() if t.pushed_at else float("inf")

    return sorted(tags, key=lambda t: (pushed(t), t.name), reverse=True)


def _stream(name: str, policy: Policy) -> str | None:
    """The first stream whose pattern the tag matches (a tag belongs to one stream)."""
    return next((s for s in policy.streams if fnmatchcase(name, s)), None)


def plan(
    tags: Iterable[Tag],
    policy: Policy,
    *,
    in_use: frozenset[str] = frozenset(),
    now: datetime | None = None,
) -> Plan:
    """The plan for a repository's tags: each tag kept or deleted, with the reason."""
    tags = sorted(tags, key=lambda t: t.name)
    reasons: dict[str, str] = {}
    for tag in tags:
        if any(re.fullmatch(p, tag.name) for p in policy.protect):
            reasons[tag.name] = "protected"
        elif tag.digest in in_use:
            reasons[tag.name] = "in use"
        elif tag.pushed_at is None:
            reasons[tag.name] = "push time unknown"
        elif now is not None and now - tag.pushed_at < policy.grace:
            reasons[tag.name] = "within the grace period"
        elif _stream(tag.name, policy) is None:
            reasons[tag.name] = "in no stream"
    for stream in policy.streams:  # the newest N count every tag of the stream, kept or not
        members = [t for t in tags if _stream(t.name, policy) == stream]
        for tag in _newest_first(members)[: policy.keep]:
            reasons.setdefault(tag.name, f"among the {policy.keep} newest of stream {stream}")
    kept_digests = {t.digest for t in tags if t.name in reasons}
    keep, delete = [], []
    for tag in tags:
        if tag.name in reasons:
            keep.append(Decision(tag.name, tag.digest, reasons[tag.name]))
        elif tag.digest in kept_digests:
            keep.append(Decision(tag.name, tag.digest, "names a digest a kept tag names"))
        else:
            why = f"beyond the {policy.keep} newest of stream {_stream(tag.name, policy)}"
            delete.append(Decision(tag.name, tag.digest, why))
    return Plan(tuple(keep), tuple(delete))


def history(registry: OciRegistry, repo: str) -> list[Tag]:
    """Every tag of `repo` with its digest and push time (the manifest's
    org.opencontainers.image.created annotation, when it has one)."""
    out = []
    for name in registry.tags(repo):
        try:
            manifest, digest, _ = registry.manifest(repo, name)
        except NotFound:  # deleted since it was listed (a concurrent run): not a tag anymore
            continue
        created = (manifest.get("annotations") or {}).get(CREATED)
        try:
            at = datetime.fromisoformat(created) if isinstance(created, str) else None
        except ValueError:
            at = None
        out.append(Tag(name, digest, at if at is None or at.tzinfo else None))
    return out


@dataclass(frozen=True)
class Policies:
    """Retention policies by repository (`host/repository` glob); the first match wins.

    >>> Policies(((("r.example/models/*"), Policy(keep=3)),)).for_repository("r.example/models/a").keep
    3
    """

    rules: tuple[tuple[str, Policy], ...] = ()

    def for_repository(self, repository: str) -> Policy | None:
        return next((p for pattern, p in self.rules if fnmatchcase(repository, pattern)), None)

    @classmethod
    def from_yaml(cls, text: str, origin: str) -> Policies:
        """`policies: [{repositories, streams, keep, protect, grace_hours}, …]`; ValueError
        naming `origin` and the entry for anything else."""
        import yaml

        doc = yaml.safe_load(text) or {}
        entries = doc.get("policies") if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise ValueError(f"{origin}: expected `policies:` with a list of policies")
        rules = []
        for n, entry in enumerate(entries):
            where = f"{origin}: policies[{n}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("repositories"), str):
                raise ValueError(f"{where}: needs `repositories` (a host/repository glob)")
            unknown = set(entry) - {"repositories", "streams", "keep", "protect", "grace_hours"}
            if unknown:
                raise ValueError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
            try:
                policy = Policy(
                    streams=tuple(str(x) for x in entry.get("streams", ())),
                    keep=int(entry.get("keep", 10)),
                    protect=tuple(str(x) for x in entry.get("protect", (r"^latest$",))),
                    grace=timedelta(hours=float(entry.get("grace_hours", 24))),
                )
            except (TypeError, ValueError, re.error) as exc:
                raise ValueError(f"{where}: {exc}") from None
            rules.append((entry["repositories"], policy))
        return cls(tuple(rules))
