"""The retention planner over random tag histories (hypothesis): protected, in-use and kept
tags are never deleted, nor a digest a kept tag names; each stream keeps its newest N;
planning what is left deletes nothing more; the plan does not depend on the listing order."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelhooks.core.records import Manifest
from modelhooks.core.retention import Plan, Policies, Policy, Tag, model_policy, plan

NOW = datetime(2026, 11, 24, tzinfo=UTC)
POLICY = Policy(streams=("v*", "nightly-*"), keep=2, protect=(r"^latest$", r"^[0-9a-f]{8}$"))

names = st.one_of(
    st.builds(
        lambda a, b, c: f"v{a}.{b}.{c}", st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)
    ),
    st.builds(lambda n: f"nightly-{n}", st.integers(0, 30)),
    st.sampled_from(["latest", "deadbeef", "cafe1234", "misc"]),
)
tags = st.lists(
    st.builds(
        Tag,
        names,
        st.sampled_from([f"sha256:{d}" for d in "abcdefgh"]),
        st.one_of(st.none(), st.integers(0, 240).map(lambda h: NOW - timedelta(hours=h))),
    ),
    max_size=30,
    unique_by=lambda t: t.name,
)


def deleted(p: Plan) -> set[str]:
    return {d.tag for d in p.delete}


@settings(max_examples=400, deadline=None)
@given(
    history=tags,
    in_use=st.frozensets(st.sampled_from([f"sha256:{d}" for d in "abcdefgh"])),
    order=st.randoms(),
)
def test_what_must_stay_stays_and_a_second_run_deletes_nothing(
    history: list[Tag], in_use: frozenset[str], order: object
) -> None:
    p = plan(history, POLICY, in_use=in_use, now=NOW)
    assert deleted(p) | {d.tag for d in p.keep} == {t.name for t in history}
    kept_digests = {d.digest for d in p.keep}
    for d in p.delete:
        tag = next(t for t in history if t.name == d.tag)
        assert not any(re.fullmatch(x, tag.name) for x in POLICY.protect)
        assert tag.digest not in in_use and tag.digest not in kept_digests
        assert tag.pushed_at is not None and NOW - tag.pushed_at >= POLICY.grace
    for stream in ("v*", "nightly-*"):  # each stream keeps at least min(N, its size)
        members = [t for t in history if t.name.startswith(stream[:-1])]
        kept = [d for d in p.keep if d.tag in {t.name for t in members}]
        assert len(kept) >= min(POLICY.keep, len(members))
    left = [t for t in history if t.name not in deleted(p)]
    assert plan(left, POLICY, in_use=in_use, now=NOW).delete == ()
    shuffled = list(history)
    order.shuffle(shuffled)  # type: ignore[attr-defined]
    assert plan(shuffled, POLICY, in_use=in_use, now=NOW) == p


def test_semantic_versions_order_a_stream() -> None:
    old = NOW - timedelta(days=30)
    history = [Tag(n, f"sha256:{n}", old) for n in ("v1.10.0", "v1.9.0", "v1.2.0", "v2.0.0-rc1")]
    p = plan(history, Policy(streams=("v*",), keep=2), now=NOW)
    assert sorted(d.tag for d in p.keep) == ["v1.10.0", "v2.0.0-rc1"]
    assert {d.tag: d.reason for d in p.delete}["v1.2.0"] == "beyond the 2 newest of stream v*"


@pytest.mark.parametrize(
    "text, message",
    [
        ("policies: nope", "expected `policies:`"),
        ("policies: [{keep: 3}]", "policies[0]: needs `repositories`"),
        ("policies: [{repositories: 'r/*', keep: -1}]", "policies[0]: keep"),
        ("policies: [{repositories: 'r/*', colour: blue}]", "unknown keys colour"),
        ("policies: [{repositories: 'r/*', protect: ['(']}]", "policies[0]"),
    ],
)
def test_a_bad_policy_file_names_the_entry(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Policies.from_yaml(text, origin="policies.yaml")


def test_a_bad_policy_file_stops_start_up(home: Path, configure: Any) -> None:
    from modelhooks.bootstrap import build
    from modelhooks.core.errors import ConfigError

    bad = home.parent / "policies.yaml"
    bad.write_text("policies: [{keep: 3}]")
    configure({"MODELHOOKS_PRUNE_POLICY_FILE": str(bad)})
    with pytest.raises(ConfigError, match="MODELHOOKS_PRUNE_POLICY_FILE"):
        build()


UNTAGGED = Policy(streams=("v*",), keep=1, untagged=timedelta(hours=48))
digests = st.sampled_from([f"sha256:{d}" for d in "abcdefgh"])
ages = st.one_of(st.none(), st.integers(0, 240).map(lambda h: NOW - timedelta(hours=h)))


@st.composite
def repositories(draw: Any) -> tuple[list[Tag], list[Manifest]]:
    """A consistent repository: each manifest has one push time and child list; tags name
    some of them, and some of the rest are listed as untagged."""
    found = {
        d: Manifest(d, draw(ages), tuple(draw(st.lists(digests, max_size=2))))
        for d in draw(st.lists(digests, min_size=1, unique=True))
    }
    names = st.builds(lambda n: f"v1.0.{n}", st.integers(0, 9)) | st.just("latest")
    named = draw(st.dictionaries(names, st.sampled_from(sorted(found)), max_size=10))
    tags = [Tag(n, d, found[d].pushed_at, found[d].children) for n, d in named.items()]
    rest = [m for d, m in sorted(found.items()) if d not in named.values()]
    return tags, [m for m in rest if draw(st.booleans())]


@settings(max_examples=300, deadline=None)
@given(repository=repositories(), in_use=st.frozensets(digests))
def test_manifests_go_only_when_nothing_needs_them(
    repository: tuple[list[Tag], list[Manifest]], in_use: frozenset[str]
) -> None:
    history, untagged = repository
    p = plan(history, UNTAGGED, untagged=untagged, in_use=in_use, now=NOW)
    gone = {d.digest for d in p.manifests}
    kept = {d.digest for d in p.keep}
    assert not gone & in_use and not gone & kept  # in use, or named by a kept tag
    listed = {c for t in history if t.digest in kept for c in t.children}
    listed |= {c for m in untagged if m.digest not in gone for c in m.children}
    listed |= {c for t in history if t.digest not in gone for c in t.children}
    assert not gone & listed  # listed by an index that stays
    pushed = {t.digest: t.pushed_at for t in history} | {m.digest: m.pushed_at for m in untagged}
    for digest in gone:  # only what is untagged (now or by this plan), and old enough
        assert digest in {d.digest for d in p.delete} | {m.digest for m in untagged}
        at = pushed[digest]
        assert at is not None and NOW - at >= UNTAGGED.untagged  # type: ignore[operator]
    # applied, then planned again: nothing more goes
    left = [t for t in history if t.name not in deleted(p)]
    was = {t.digest: t for t in history if t.name in deleted(p)}
    stay = [m for m in untagged if m.digest not in gone] + [
        Manifest(t.digest, t.pushed_at, t.children)
        for d, t in was.items()
        if d not in gone and d not in {x.digest for x in left}
        and d not in {m.digest for m in untagged}
    ]  # fmt: skip
    again = plan(left, UNTAGGED, untagged=stay, in_use=in_use, now=NOW)
    assert again.delete == () and again.manifests == ()


def test_the_referrers_index_tag_goes_with_its_manifest() -> None:
    old = NOW - timedelta(days=30)
    subject = "sha256:" + "a" * 64
    history = [
        Tag("v1.0.0", subject, old),
        Tag("v2.0.0", "sha256:" + "b" * 64, old),
        Tag("sha256-" + "a" * 64, "sha256:" + "c" * 64, old),  # its referrers (fallback)
    ]
    p = plan(history, UNTAGGED, now=NOW)
    assert [d.tag for d in p.delete] == ["sha256-" + "a" * 64, "v1.0.0"]
    assert [d.digest for d in p.manifests] == [subject, "sha256:" + "c" * 64]
    assert [d.tag for d in p.keep] == ["v2.0.0"]


def test_without_untagged_manifests_stay() -> None:
    old = NOW - timedelta(days=30)
    history = [Tag("v1.0.0", "sha256:a", old), Tag("v2.0.0", "sha256:b", old)]
    assert plan(history, Policy(streams=("v*",), keep=1), now=NOW).manifests == ()


def test_a_model_asks_for_its_policy() -> None:
    p = model_policy({"retention": {"keepVersions": 2, "protectedTags": ["prod.1"]}})
    assert p is not None and p.keep == 2 and p.streams == ("*",)
    assert p.protect == (r"^latest$", r"^prod\.1$")  # exact names, not regexes
    assert model_policy({"retention": {"keepVersions": 0}}) is None
    assert model_policy({}) is None
    with pytest.raises(ValueError, match="keepVersions"):
        model_policy({"retention": {"keepVersions": "3"}})


def test_untagged_hours_in_the_policy_file() -> None:
    policies = Policies.from_yaml(
        "policies: [{repositories: 'r/*', untagged_hours: 72}]", origin="p.yaml"
    )
    found = policies.for_repository("r/a")
    assert found is not None and found.untagged == timedelta(hours=72)


def test_an_index_that_stays_keeps_what_it_lists() -> None:
    old, young = NOW - timedelta(days=30), NOW - timedelta(hours=1)
    untagged = [
        Manifest("sha256:index", young, ("sha256:child",)),  # too young to go
        Manifest("sha256:child", old),
        Manifest("sha256:lone", old),
    ]
    p = plan([], UNTAGGED, untagged=untagged, now=NOW)
    assert [d.digest for d in p.manifests] == ["sha256:lone"]


def test_a_sha512_manifest_s_referrers_tag_is_no_version() -> None:
    """The fallback referrers tag of a manifest pinned by its sha512 digest (sha512-<hex>,
    as distribution names it: the digest, ':' as '-') and cosign's .sig beside it are in no
    stream, as sha256-<hex> is: kept while their manifest stays, gone with it. Before,
    under a Model's default stream '*', each counted as a version newer than the model's
    own: with keep 1 the one real version was deleted, its signature's index kept."""
    old, newer = NOW - timedelta(days=30), NOW - timedelta(days=20)
    subject = "sha512:" + "a" * 128
    referrers = "sha512-" + "a" * 128
    history = [
        Tag("v1.0.0", "sha256:" + "b" * 64, old),
        Tag("v2.0.0", subject, old),
        Tag(referrers, "sha256:" + "c" * 64, newer),
        Tag(f"{referrers}.sig", "sha256:" + "d" * 64, newer),
    ]
    p = plan(history, Policy(streams=("*",), keep=1), now=NOW)
    assert [d.tag for d in p.delete] == ["v1.0.0"]
    assert {d.tag: d.reason for d in p.keep if d.tag != "v2.0.0"} == {
        referrers: f"the referrers of {subject}",
        f"{referrers}.sig": f"the referrers of {subject}",
    }
    # the version going, its referrers index goes with it, as sha256-<hex> does
    going = [Tag("v1.0.0", subject, old), Tag("v2.0.0", "sha256:" + "b" * 64, old)]
    p = plan([*going, Tag(referrers, "sha256:" + "c" * 64, old)], UNTAGGED, now=NOW)
    assert [d.tag for d in p.delete] == [referrers, "v1.0.0"]
    assert [d.digest for d in p.manifests] == [subject, "sha256:" + "c" * 64]
