"""Deletion by policy when a model is deleted: what goes, what stays and why, then exactly
that, in the safe order.

A deletion policy says what happens to a deleted model version's artifact:
- `Retain` (the default): nothing.
- `Delete`: every object under the version's prefix (data, ready marker, signature; old
  revisions too with `old_versions`), or its OCI manifest with its referrers and tags.
- `Untag`: the ready marker of an object-store version (the data stays, no longer ready);
  for OCI the mutable tags naming the version's digest, except tags matching `protect`
  (e.g. a 40-hex git SHA); the content stays.

Whatever the policy says, nothing another live version uses goes: an object inside a
location a live version names, a digest a live version names, or a manifest a protected
tag names or a tagged index lists, through the indexes it lists too (its own tags go).
`plan_*` only read; `apply` deletes exactly the plan — referrers, tags, manifests; objects
in as few requests as the store allows — and deleting what is gone succeeds, so a second
delivery deletes nothing.

>>> Policy.parse("Delete").name
'Delete'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import msgspec

from modelhooks.core.errors import BadRequest
from modelhooks.core.policy_files import entries, flag, strings
from modelhooks.core.records import ObjectInfo

if TYPE_CHECKING:
    from modelhooks.core.ports import ObjectStore, OciRegistry

__all__ = [
    "MAX_DELETES",
    "POLICIES",
    "Cleanup",
    "Deletion",
    "Policy",
    "Progress",
    "Purge",
    "apply_objects",
    "apply_oci",
    "check_prefix",
    "plan_objects",
    "plan_oci",
]

POLICIES = ("Retain", "Delete", "Untag")
_OPTIONS = {"deletionPolicy", "protect", "old_versions"}  # of a cleanup.policy_file entry
CHUNK = 1000  # objects per delete_many call (S3 DeleteObjects takes at most 1000 keys)
# objects one delivery deletes in one location (S3: 10 requests; GCS: about 10 s at 16 at a
# time): a version of more is deleted a batch a delivery (the handler answers Throttled)
MAX_DELETES = 10_000
Progress = Callable[[int], object]
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PROTECT = (r"^[0-9a-f]{40}$",)  # the tags Untag keeps by default (a git SHA)


# The records below are frozen msgspec Structs, not dataclasses: making a Struct class costs
# ~2 % of a dataclass's (~0.5 ms of CPU each at the start of a process that imports them)
class Policy(msgspec.Struct, frozen=True):
    name: str = "Retain"
    protect: tuple[str, ...] = _PROTECT  # tags Untag keeps
    old_versions: bool = False  # Delete also removes old revisions (versioned buckets)

    @classmethod
    def parse(cls, name: object, **options: object) -> Policy:
        """The policy called `name`; BadRequest naming the allowed values otherwise."""
        if name not in POLICIES:
            raise BadRequest(
                f"deletionPolicy {name!r} is not one of {', '.join(POLICIES)}",
                field="deletionPolicy",
            )
        return cls(str(name), **options)  # type: ignore[arg-type]


class Deletion(msgspec.Struct, frozen=True):
    kind: str  # "object", "revision", "referrer", "tag" or "manifest"
    name: str  # the key, the tag or the digest
    reason: str
    # the revision planned: an object's listed generation (deleted only while current), the
    # digest a tag named (untagged only while it still names it)
    generation: str = ""
    first: bool = False  # deleted before the rest, alone: the ready marker


class Purge(msgspec.Struct, frozen=True):
    """The plan for one location: what goes (in order) and what stays, with why."""

    location: str
    deletions: tuple[Deletion, ...] = ()
    kept: tuple[tuple[str, str], ...] = ()
    failed: dict[str, str] = msgspec.field(default_factory=dict)  # after apply: name → why
    more: bool = False  # planned no further than a limit: more is left for another run


def check_prefix(key: str, where: str) -> str:
    """A version's key prefix as events name it, refused when it could reach elsewhere:
    `..` segments, an absolute path or control characters. Ends with `/` (so `m/1/` never
    covers `m/10/`)."""
    if _CONTROL.search(key) or key.startswith("/") or ".." in key.split("/"):
        raise BadRequest(f"{where}: key prefix {key!r} is not a plain relative path", key=key)
    if not key.strip("/"):
        raise BadRequest(f"{where}: names a whole bucket, not a model version", key=key)
    return key if key.endswith("/") else key + "/"


def plan_objects(
    store: ObjectStore,
    bucket: str,
    prefix: str,
    policy: Policy,
    *,
    marker: str,
    in_use: Iterable[str] = (),
    limit: int | None = None,
) -> Purge:
    """The plan for an object-store version under `bucket`/`prefix` (from `check_prefix`).
    `in_use`: key prefixes in this bucket that live versions name ("" for the whole
    bucket); a version whose own location lies inside one of them is kept whole, objects
    inside one stay. `limit`: the listing is read no further than that many deletions
    (the ready marker among them), `more` saying it stopped there."""
    location = f"{bucket}/{prefix}"
    used = [p if p.endswith("/") or not p else p + "/" for p in in_use]  # "": the bucket
    if policy.name == "Retain":
        return Purge(location, kept=((prefix, "deletionPolicy Retain"),))
    if any(prefix.startswith(p) for p in used):
        return Purge(location, kept=((prefix, "a live version uses this location"),))
    if policy.name == "Untag":
        found = store.stat(bucket, prefix + marker)
        if found is None:
            return Purge(location)  # not ready (or untagged already): nothing to do
        why = "Untag: the ready marker (the data stays)"
        return Purge(location, (Deletion("object", found.key, why, found.generation),))
    listing = (
        store.list_versions(bucket, prefix) if policy.old_versions else store.list(bucket, prefix)
    )
    deletions: list[Deletion] = []
    kept: list[tuple[str, str]] = []
    more = False
    for info in listing:
        if not info.key.startswith(prefix):  # a store must not list outside; never delete it
            continue
        if limit is not None and len(deletions) >= limit:
            more = True
            break
        inside = next((p for p in used if info.key.startswith(p)), None)
        if inside is not None:
            kept.append((info.key, f"inside {inside}, a live version's location"))
            continue
        # with old_versions a current object goes as its listed revision too: deleted by
        # key, a versioned bucket would keep its data as one more old revision
        kind = "object" if info.current and not policy.old_versions else "revision"
        first = info.key == prefix + marker  # a delete stopped halfway leaves it not ready
        why = "Delete: the ready marker, first" if first else "Delete: the version's objects"
        deletions.append(Deletion(kind, info.key, why, info.generation, first))
    if more and not any(d.first for d in deletions):  # listed further on: it goes first
        found = store.stat(bucket, prefix + marker)
        if found is not None:
            kind = "revision" if policy.old_versions else "object"
            why = "Delete: the ready marker, first"
            deletions.append(Deletion(kind, found.key, why, found.generation, True))
    deletions.sort(key=lambda d: not d.first)  # stable: the listing's order otherwise
    return Purge(location, tuple(deletions), tuple(kept), more=more)


def plan_oci(
    registry: OciRegistry,
    repo: str,
    digest: str,
    policy: Policy,
    *,
    tags: Sequence[str] = (),
    in_use: Iterable[str] = (),
    listed_by: Sequence[str] = (),
    tagged: Iterable[str] = (),
) -> Purge:
    """The plan for an OCI version: `digest` in `repo`, named by `tags` (its tags, as the
    registry lists them). A digest a live version names stays, with its tags; one an index
    that stays lists (`listed_by`: the tags of those indexes), or a referrer that stays
    refers to (one a live version or a tag names: `tagged`, the digests tags name; an
    adapter pushed with its base model as subject), stays too, its own tags go."""
    location = f"{repo}@{digest}"
    if policy.name == "Retain":
        return Purge(location, kept=((digest, "deletionPolicy Retain"),))
    if digest in set(in_use):
        return Purge(location, kept=((digest, "a live version uses this digest"),))
    protected = [t for t in tags if any(re.fullmatch(p, t) for p in policy.protect)]
    kept = [(t, "protected tag") for t in protected]
    untag = [
        Deletion("tag", t, f"{policy.name}: names the version", digest)
        for t in tags
        if t not in protected
    ]
    if policy.name == "Untag":
        return Purge(location, tuple(untag), tuple(kept))
    if protected:  # a protected tag still names the content: the manifest stays
        kept.append((digest, f"named by the protected tag {protected[0]}"))
        return Purge(location, tuple(untag), tuple(kept))
    if listed_by:  # deleted, it would leave that index naming a manifest that is gone
        kept.append((digest, f"listed by the index {listed_by[0]}, which stays"))
        return Purge(location, tuple(untag), tuple(kept))
    found = [str(r["digest"]) for r in registry.referrers(repo, digest)]
    staying = sorted(set(found) & (set(in_use) | set(tagged)))
    if staying:  # its referrers go with it, but not these: nor does it
        kept.append((digest, f"referred to by {staying[0]}, which a live version or a tag names"))
        return Purge(location, tuple(untag), tuple(kept))
    referrers = [Deletion("referrer", r, f"refers to {digest}") for r in found]
    manifest = Deletion("manifest", digest, "Delete: the version's manifest")
    # A registry without the referrers API lists them in an index tagged `sha256-<hex>`
    # (the fallback scheme): it goes with the manifest (as prune's plan does).
    fallback = digest.replace(":", "-")
    index = registry.resolve(repo, fallback)
    indexes = (
        (
            Deletion("tag", fallback, f"the referrers index of {digest}", index),
            Deletion("manifest", index, f"the referrers index {fallback}"),
        )
        if index is not None and index != digest
        else ()
    )
    return Purge(location, (*referrers, *untag, manifest, *indexes), tuple(kept))


def apply_objects(
    store: ObjectStore, bucket: str, purge: Purge, *, progress: Progress = lambda n: None
) -> Purge:
    """Delete the plan's objects (current ones while still the listed revision; old
    revisions themselves), the ready marker first and alone (a delete stopped halfway — a
    crash, a store failing — leaves the version not ready, never ready with files gone;
    kept, it stops the rest), then `CHUNK` at a time (S3's DeleteObjects limit;
    `progress(n)` after each); the plan with what failed, by key. A transient failure
    raises after the rest of its chunk was attempted."""

    def infos(kind: str, first: bool) -> list[ObjectInfo]:
        current = kind == "object"
        return [
            ObjectInfo(bucket, d.name, 0, d.generation, current=current)
            for d in purge.deletions
            if d.kind == kind and d.first == first
        ]

    failed: dict[str, str] = {}
    for first in (True, False):
        for kind in ("object", "revision"):
            objects = infos(kind, first)
            for start in range(0, len(objects), CHUNK):
                chunk = objects[start : start + CHUNK]
                failed |= store.delete_many(bucket, chunk, versions=kind == "revision")
                progress(len(chunk))
        if first and failed:  # the marker stays (refused): the version is left whole
            kept = {d.name for d in purge.deletions if not d.first}
            failed |= {k: "not attempted: the ready marker could not be deleted" for k in kept}
            break
    return Purge(purge.location, purge.deletions, purge.kept, failed, purge.more)


def apply_oci(
    registry: OciRegistry, repo: str, purge: Purge, *, progress: Progress = lambda n: None
) -> Purge:
    """Delete the plan in order: referrers, tags, the manifest (gone already: fine), as the
    repository is now: a tag that names another digest than planned (pushed again since)
    stays; the manifest, its referrers and referrers index stay when a tag the plan leaves
    names it now, or lists it (a manifest DELETE takes or strands every tag naming it).
    The plan as applied: what stays since, among `kept`."""
    digest = purge.location.rpartition("@")[2]
    tags = [d for d in purge.deletions if d.kind == "tag"]
    kept = list(purge.kept)
    if any(d.kind == "manifest" for d in purge.deletions):
        planned = {d.name: d.generation for d in tags}
        for tag in registry.history(repo)[0]:
            if planned.get(tag.name) != tag.digest and digest in (tag.digest, *tag.children):
                kept.append((digest, f"the tag {tag.name} names it since the plan"))
                fallback = digest.replace(":", "-")
                tags = [d for d in tags if d.name != fallback]
                break
    held = len(kept) > len(purge.kept)
    gone = [d for d in tags if not d.generation or registry.resolve(repo, d.name) == d.generation]
    kept += [(d.name, "names another digest since the plan") for d in tags if d not in gone]
    done = [
        *([] if held else [d for d in purge.deletions if d.kind == "referrer"]),
        *gone,
        *([] if held else [d for d in purge.deletions if d.kind == "manifest"]),
    ]
    registry.delete_manifests(repo, [d.name for d in done if d.kind == "referrer"])
    for d in gone:
        registry.delete_tag(repo, d.name)
    registry.delete_manifests(repo, [d.name for d in done if d.kind == "manifest"])
    progress(len(purge.deletions))
    return Purge(purge.location, tuple(done), tuple(kept), purge.failed, purge.more)


class Cleanup(msgspec.Struct, frozen=True):
    """cleanup's configuration: the ready marker's name and the policies by model-name
    glob (`cleanup.policy_file`) for models whose deletion carries none (a Model's
    `spec.deletionPolicy` wins); the first match wins, none: Retain.

    >>> Cleanup.from_yaml("policies: [{models: 'bert-*', deletionPolicy: Delete}]", "p.yaml").policy_for("bert-2").name
    'Delete'
    """

    rules: tuple[tuple[str, Policy], ...] = ()
    marker: str = "_SUCCESS"

    def policy_for(self, model: str) -> Policy:
        from fnmatch import fnmatchcase

        return next((p for pattern, p in self.rules if fnmatchcase(model, pattern)), Policy())

    @classmethod
    def from_yaml(cls, text: str, origin: str, *, marker: str = "_SUCCESS") -> Cleanup:
        """`policies: [{models, deletionPolicy, protect, old_versions}, …]`; ValueError
        naming `origin` and the entry for anything else."""
        rules = []
        for where, glob, entry in entries(text, origin, selector="models", options=_OPTIONS):
            try:
                policy = Policy.parse(
                    entry.get("deletionPolicy", "Retain"),
                    protect=strings("protect", entry.get("protect", list(_PROTECT))),
                    old_versions=flag("old_versions", entry.get("old_versions", False)),
                )
                for pattern in policy.protect:
                    re.compile(pattern)
            except (BadRequest, ValueError, re.error) as exc:
                raise ValueError(f"{where}: {exc}") from None
            rules.append((glob, policy))
        return cls(tuple(rules), marker)
