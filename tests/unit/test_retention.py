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

from modelhooks.core.retention import Plan, Policies, Policy, Tag, plan

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
