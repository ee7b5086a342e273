"""Tag retention: which tags (and untagged manifests) of a repository to keep and which to
delete, and why; then deleting exactly that, in the safe order.

A policy groups tags into streams (glob patterns, e.g. `v*`, `nightly-*`; a tag in no stream
is kept), keeps the `keep` newest versions of each stream — by semantic version when every
tag of the stream is one, else by push time; the tags naming one digest are one version,
protected tags count among them — and protects,
whatever the rest says:
- tags matching a `protect` regex (`latest`, release tags, a 40-hex git SHA, …);
- tags pushed within `grace` (and tags whose push time is unknown);
- tags naming a digest in use (a live Model or registry version references it) or a
  digest that a kept tag names too;
- a manifest's referrers tag (`sha256-<hex>` or `sha512-<hex>`, the fallback index of a
  registry without the referrers API; cosign's `.sig`, `.att`, `.sbom`): no version, in no
  stream, it goes only with its manifest.
With `untagged` set, manifests left without a tag — by this plan, or already (where the
registry can list them) — that were pushed longer ago than that are deleted too, except a
digest in use, named by a kept tag, or listed by a kept index.

`plan` is pure: the same inputs give the same plan, and applying a plan, then planning
again, deletes nothing more. `apply` deletes in the order that leaves nothing dangling:
the referrers of the manifests to delete (signatures, SBOMs), then the tags, then the
manifests.

>>> from datetime import UTC
>>> old = datetime(2026, 1, 1, tzinfo=UTC)
>>> tags = [Tag("v1.0.0", "a", old), Tag("v1.2.0", "b", old), Tag("latest", "b", old)]
>>> [(d.tag, d.reason) for d in plan(tags, Policy(streams=("v*",), keep=1)).delete]
[('v1.0.0', 'beyond the 1 newest of stream v*')]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import msgspec

from modelhooks.core.policy_files import count, entries, hours, strings
from modelhooks.core.records import Manifest, Tag

if TYPE_CHECKING:
    from modelhooks.core.ports import OciRegistry

__all__ = [
    "Applied",
    "Decision",
    "Plan",
    "Policies",
    "Policy",
    "Tag",
    "apply",
    "model_policy",
    "plan",
    "referrers",
    "spare_referred",
]

# compiled when a plan first reads a tag (re's own cache), not at every start
# The tag of a manifest's referrers where the registry has no referrers API: the OCI
# fallback index (`sha256-<hex>`, `sha512-<hex>`: the digest's algorithm, as the registries
# take digests), cosign's signatures, attestations and SBOMs
_REFERRERS = r"(?:sha256-[0-9a-f]{64}|sha512-[0-9a-f]{128})(?:\.sig|\.att|\.sbom)?"
_SEMVER = r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"


# The records below are frozen msgspec Structs, not dataclasses: making a Struct class costs
# ~2 % of a dataclass's (~0.5 ms of CPU each at the start of a process that imports them)
class Policy(msgspec.Struct, frozen=True):
    streams: tuple[str, ...] = ()  # glob patterns; a tag in none of them is kept
    keep: int = 10  # the newest N of each stream
    protect: tuple[str, ...] = (r"^latest$",)  # regexes (full match)
    grace: timedelta = timedelta(days=1)
    untagged: timedelta | None = None  # delete manifests left untagged, pushed before this

    def __post_init__(self) -> None:
        if self.keep < 0:
            raise ValueError("keep: must be 0 or more")
        for pattern in self.protect:
            re.compile(pattern)  # a bad regex fails here, naming itself


class Decision(msgspec.Struct, frozen=True):
    tag: str  # "" for an untagged manifest
    digest: str
    reason: str


class Plan(msgspec.Struct, frozen=True):
    keep: tuple[Decision, ...] = ()  # tags kept
    delete: tuple[Decision, ...] = ()  # tags deleted
    manifests: tuple[Decision, ...] = ()  # manifests deleted (with their referrers)


def _version(name: str) -> tuple[int, int, int, int, str] | None:
    m = re.match(_SEMVER, name)
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
    """The first stream whose pattern the tag matches (a tag belongs to one stream); none
    for a referrers tag (`_REFERRERS`): it is no version."""
    if re.fullmatch(_REFERRERS, name):
        return None
    return next((s for s in policy.streams if fnmatchcase(name, s)), None)


def plan(
    tags: Iterable[Tag],
    policy: Policy,
    *,
    untagged: Iterable[Manifest] = (),
    in_use: frozenset[str] = frozenset(),
    now: datetime | None = None,
) -> Plan:
    """The plan for a repository: each tag kept or deleted, and the untagged manifests
    deleted, with the reason."""
    tags = sorted(tags, key=lambda t: t.name)
    reasons: dict[str, str] = {}
    for tag in tags:
        if any(re.fullmatch(p, tag.name) for p in policy.protect):
            reasons[tag.name] = "protected"
        elif tag.digest in in_use:
            reasons[tag.name] = "in use"
        elif re.fullmatch(_REFERRERS, tag.name):  # it goes with its manifest, if that goes
            reasons[tag.name] = "the referrers of " + tag.name.split(".")[0].replace("-", ":")
        elif tag.pushed_at is None:
            reasons[tag.name] = "push time unknown"
        elif now is not None and now - tag.pushed_at < policy.grace:
            reasons[tag.name] = "within the grace period"
        elif _stream(tag.name, policy) is None:
            reasons[tag.name] = "in no stream"
    for stream in policy.streams:  # the newest N count every tag of the stream, kept or not
        members = [t for t in tags if _stream(t.name, policy) == stream]
        versions: set[str] = set()  # N versions: tags naming one digest (v3, sha-3) are one
        for tag in _newest_first(members):
            if tag.digest not in versions:
                if len(versions) == policy.keep:
                    continue
                versions.add(tag.digest)
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
    manifests = _manifests(tags, (keep, delete), untagged, policy, in_use, now)
    # A registry without the referrers API lists a manifest's referrers in an index tagged
    # `sha256-<hex>` (the fallback scheme): it goes with the manifest.
    fallback = {m.digest.replace(":", "-") for m in manifests}
    indexes = [d for d in keep if d.tag in fallback]
    for d in indexes:
        keep.remove(d)
        delete.append(Decision(d.tag, d.digest, "the referrers index of a deleted manifest"))
    manifests += tuple(Decision("", d.digest, f"the referrers index {d.tag}") for d in indexes)
    return Plan(tuple(keep), tuple(sorted(delete, key=lambda d: d.tag)), manifests)


def _manifests(
    tags: Sequence[Tag],
    plan_: tuple[list[Decision], list[Decision]],
    untagged: Iterable[Manifest],
    policy: Policy,
    in_use: frozenset[str],
    now: datetime | None,
) -> tuple[Decision, ...]:
    """The manifests `plan` deletes: untagged (by the plan's deletes, or already) and pushed
    longer than `policy.untagged` ago; never one in use, named by a kept tag or listed by
    an index that stays."""
    if policy.untagged is None or now is None:
        return ()
    keep, delete = plan_
    by_tag = {t.name: t for t in tags}
    candidates: dict[str, tuple[datetime | None, tuple[str, ...], str]] = {}
    for d in delete:
        tag = by_tag[d.tag]
        candidates[d.digest] = (tag.pushed_at, tag.children, "its tags are deleted")
    for m in untagged:
        candidates.setdefault(m.digest, (m.pushed_at, m.children, "untagged"))
    protected = set(in_use) | {d.digest for d in keep}
    protected |= {c for d in keep for c in by_tag[d.tag].children}
    horizon = now - policy.untagged
    gone = {d for d, (at, _, _) in candidates.items() if at is not None and at <= horizon}
    while True:  # an index that stays keeps what it lists (nested indexes: until stable)
        staying = protected | (candidates.keys() - gone)
        listed = {c for d in staying if d in candidates for c in candidates[d][1]}
        left = gone - protected - listed
        if left == gone:
            break
        gone = left
    hours = f"{policy.untagged.total_seconds() / 3600:g}h"
    return tuple(
        Decision("", d, f"{candidates[d][2]}, pushed more than {hours} ago") for d in sorted(gone)
    )


Referrers = dict[str, list[dict[str, Any]]]  # a manifest's digest: its referrers' descriptors


def read_referrers(
    registry: OciRegistry, repo: str, planned: Plan, *, workers: int = 8
) -> Referrers:
    """The referrers of each manifest `planned` deletes, one read each: for `spare_referred`
    and then `referrers`, which read none again."""
    if not planned.manifests:
        return {}
    from concurrent.futures import ThreadPoolExecutor  # a plan that deletes manifests only

    digests = list(dict.fromkeys(d.digest for d in planned.manifests))
    with ThreadPoolExecutor(workers) as pool:
        found = pool.map(lambda d: registry.referrers(repo, d), digests)
        return dict(zip(digests, found, strict=True))


def spare_referred(
    registry: OciRegistry,
    repo: str,
    planned: Plan,
    *,
    in_use: frozenset[str],
    workers: int = 8,
    found: Referrers | None = None,
) -> Plan:
    """`planned` without the manifests a referrer that stays refers to — one in use or a
    kept tag names (an adapter pushed with its base model as subject, registered live) —
    nor their referrers indexes: their referrers would go first, that one among them.
    One referrers read per planned manifest, none where `found` (`read_referrers`) has it."""
    if not planned.manifests:
        return planned
    found = _with_read(registry, repo, planned, found, workers)
    staying = set(in_use) | {d.digest for d in planned.keep}
    held = {
        d.digest
        for d in planned.manifests
        if any(str(r.get("digest")) in staying for r in found[d.digest])
    }
    if not held:
        return planned
    indexes = {h.replace(":", "-") for h in held}  # the referrers index stays with its manifest
    back = [d for d in planned.delete if d.tag in indexes]
    held |= {d.digest for d in back}
    why = "the referrers index of a manifest a live or kept referrer refers to"
    return Plan(
        (*planned.keep, *(Decision(d.tag, d.digest, why) for d in back)),
        tuple(d for d in planned.delete if d not in back),
        tuple(d for d in planned.manifests if d.digest not in held),
    )


class Applied(msgspec.Struct, frozen=True):
    """What `apply` did: tags deleted, tags skipped (moved or gone since planning),
    referrers and manifests deleted, manifests held (a tag names them now)."""

    deleted: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    referrers: tuple[str, ...] = ()
    manifests: tuple[str, ...] = ()
    held: tuple[str, ...] = ()


def referrers(
    registry: OciRegistry,
    repo: str,
    planned: Plan,
    *,
    workers: int = 8,
    found: Referrers | None = None,
) -> tuple[str, ...]:
    """The referrers `apply` deletes with the plan's manifests (signatures, SBOMs), not one
    a kept tag names: found before anything is deleted, so a plan can be recorded whole.
    Those `found` (`read_referrers`, as `spare_referred` had them) are not read again."""
    found = _with_read(registry, repo, planned, found, workers)
    kept = {d.digest for d in planned.keep}
    digests = {d.digest for d in planned.manifests}
    listed = {str(r["digest"]) for d in digests for r in found[d]}
    return tuple(sorted(listed - kept - digests))


def _with_read(
    registry: OciRegistry, repo: str, planned: Plan, found: Referrers | None, workers: int
) -> Referrers:
    """`found` with the referrers of the planned manifests it lacks, read now."""
    have = found or {}
    missing = Plan(manifests=tuple(d for d in planned.manifests if d.digest not in have))
    return {**have, **read_referrers(registry, repo, missing, workers=workers)}


def apply(
    registry: OciRegistry,
    repo: str,
    planned: Plan,
    *,
    workers: int = 8,
    progress: Callable[[int], Any] = lambda n: None,
    found: Sequence[str] | None = None,
    again: bool = False,
) -> Applied:
    """Delete exactly what `planned` says, `workers` requests at a time: the referrers of
    its manifests (`found`, else `referrers`), then its tags (each only if it still names
    the planned digest: a tag moved since is skipped), then its manifests — but not one a
    tag names now that the plan does not delete (pushed there since: a rollback, a plan
    file applied later, a redelivery; a manifest DELETE takes or strands every tag naming
    it), nor what such a tag's index lists, nor their referrers and referrers index: when
    the plan deletes manifests, the repository is listed again first. Deleting what is
    gone succeeds, so a second run (or a redelivery) is harmless; a tag another run removed
    meanwhile is skipped, not told deleted twice. `again`: the plan is one a run applied
    before (a redelivery of the delivery that recorded it), so a planned tag found gone is
    told deleted: that run removed it, and is answered so again. `progress(n)` is told of
    every n items done."""
    from concurrent.futures import ThreadPoolExecutor  # a plan applied, not every start

    held = _named_now(registry, repo, planned) if planned.manifests else set()
    if held:
        indexes = {h.replace(":", "-") for h in held}  # their referrers indexes stay too
        planned = Plan(
            planned.keep,
            tuple(d for d in planned.delete if d.tag not in indexes),
            tuple(d for d in planned.manifests if d.digest not in held),
        )
        if found is not None:
            theirs = {str(r["digest"]) for h in held for r in registry.referrers(repo, h)}
            found = [r for r in found if r not in theirs]
    digests = [d.digest for d in planned.manifests]
    gone = tuple(referrers(registry, repo, planned, workers=workers) if found is None else found)
    with ThreadPoolExecutor(workers) as pool:
        registry.delete_manifests(repo, gone)

        def untag(d: Decision) -> bool:
            # told deleted only when this run removed it: two runs at once (two pushes,
            # a duplicate) both find it naming the digest, and one deletes it
            now = registry.resolve(repo, d.tag)
            done = (now == d.digest and registry.delete_tag(repo, d.tag)) or (again and now is None)
            progress(1)
            return done

        done = list(pool.map(untag, planned.delete))
    registry.delete_manifests(repo, digests)
    progress(len(digests))
    return Applied(
        deleted=tuple(d.tag for d, ok in zip(planned.delete, done, strict=True) if ok),
        skipped=tuple(d.tag for d, ok in zip(planned.delete, done, strict=True) if not ok),
        referrers=gone,
        manifests=tuple(digests),
        held=tuple(sorted(held)),
    )


def _named_now(registry: OciRegistry, repo: str, planned: Plan) -> set[str]:
    """The planned manifests a tag names now (or an index it names lists), other than the
    plan's own tags still naming what the plan says, with the referrers indexes
    (`sha256-<hex>`) the plan deletes with them."""
    tags, untagged = registry.history(repo)
    going = {(d.tag, d.digest) for d in planned.delete}
    doomed = {d.digest for d in planned.manifests}
    named: set[str] = set()
    for tag in tags:
        if (tag.name, tag.digest) not in going:
            named |= {tag.digest, *tag.children}
    for manifest in untagged:  # an index the plan leaves (Artifact Registry lists them)
        if manifest.digest not in doomed:
            named |= set(manifest.children)
    held = named & doomed
    indexes = {h.replace(":", "-") for h in held}
    return held | {d.digest for d in planned.delete if d.tag in indexes and d.digest in doomed}


class Policies(msgspec.Struct, frozen=True):
    """Retention policies by repository (`host/repository` glob); the first match wins.

    >>> Policies(((("r.example/models/*"), Policy(keep=3)),)).for_repository("r.example/models/a").keep
    3
    """

    rules: tuple[tuple[str, Policy], ...] = ()

    def for_repository(self, repository: str) -> Policy | None:
        return next((p for pattern, p in self.rules if fnmatchcase(repository, pattern)), None)

    @classmethod
    def from_yaml(cls, text: str, origin: str) -> Policies:
        """`policies: [{repositories, streams, keep, protect, grace_hours, untagged_hours},
        …]`; ValueError naming `origin` and the entry for anything else."""
        rules = []
        for where, glob, entry in entries(text, origin, selector="repositories", options=_KEYS):
            try:
                policy = Policy(
                    streams=strings("streams", entry.get("streams", [])),
                    keep=count("keep", entry.get("keep", 10)),
                    protect=strings("protect", entry.get("protect", [r"^latest$"])),
                    grace=hours("grace_hours", entry.get("grace_hours", 24)),
                    untagged=_hours(entry.get("untagged_hours")),
                )
            except (TypeError, ValueError, re.error) as exc:
                raise ValueError(f"{where}: {exc}") from None
            rules.append((glob, policy))
        return cls(tuple(rules))


_KEYS = {"streams", "keep", "protect", "grace_hours", "untagged_hours"}


def _hours(value: Any) -> timedelta | None:
    return None if value is None else hours("untagged_hours", value)


def model_policy(spec: dict[str, Any]) -> Policy | None:
    """The policy a `Model` resource asks for (`spec.retention`: keepVersions, the newest
    N of all tags; protectedTags, exact names, besides `latest`), or None when it asks
    for none (keepVersions 0 or absent).

    >>> model_policy({"retention": {"keepVersions": 3, "protectedTags": ["prod"]}}).protect
    ('^latest$', '^prod$')
    """
    retention = spec.get("retention")
    if not isinstance(retention, dict) or not retention.get("keepVersions"):
        return None
    keep, protected = retention["keepVersions"], retention.get("protectedTags") or []
    if isinstance(keep, bool) or not isinstance(keep, int) or not isinstance(protected, list):
        raise ValueError("spec.retention: keepVersions must be a count, protectedTags a list")
    exact = tuple(f"^{re.escape(str(t))}$" for t in protected)
    return Policy(streams=("*",), keep=keep, protect=(r"^latest$", *exact))
