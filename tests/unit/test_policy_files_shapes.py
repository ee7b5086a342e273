"""A policy file's lists and switches must be what they say: a bare string where a list
goes (`protect: ^prod$`, brackets forgotten) was read a character at a time — `^`, `p`,
`r`, … protected one-character tags and `prod` no more, so Untag and prune deleted it —
and `streams: v*` made `*` a stream of every tag; a quoted `old_versions: "false"` was
true, and Delete took every old revision. Each is a ValueError naming the entry now, so
a ConfigError at start-up (the files are read there)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from modelhooks.core.cleanup import Cleanup
from modelhooks.core.records import Tag
from modelhooks.core.retention import Policies, plan


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ("{repositories: 'r/*', streams: ['v*'], protect: '^prod$'}", "protect"),
        ("{repositories: 'r/*', streams: 'v*'}", "streams"),
        ("{repositories: 'r/*', streams: ['v*'], protect: [['^prod$']]}", "protect"),
    ],
)
def test_a_retention_list_that_is_none_is_refused(entry: str, key: str) -> None:
    with pytest.raises(ValueError, match=rf"policies\[0\]: {key}: a list"):
        Policies.from_yaml(f"policies: [{entry}]", "prune.yaml")


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ("{models: 'b*', deletionPolicy: Untag, protect: '^prod$'}", "protect"),
        ("{models: 'b*', deletionPolicy: Delete, old_versions: 'false'}", "old_versions"),
        ("{models: 'b*', deletionPolicy: Delete, old_versions: 1}", "old_versions"),
    ],
)
def test_a_cleanup_list_or_switch_that_is_none_is_refused(entry: str, key: str) -> None:
    with pytest.raises(ValueError, match=rf"policies\[0\]: {key}: a"):
        Cleanup.from_yaml(f"policies: [{entry}]", "cleanup.yaml")


def test_lists_and_switches_as_written_still_read() -> None:
    old = datetime.now(UTC) - timedelta(days=30)
    policies = Policies.from_yaml(
        "policies: [{repositories: 'r/*', streams: ['v*'], keep: 1, protect: ['^prod$']}]", "p"
    )
    policy = policies.for_repository("r/m")
    assert policy is not None
    tags = [Tag("v1", "sha256:a", old), Tag("v2", "sha256:b", old), Tag("prod", "sha256:a", old)]
    assert [d.tag for d in plan(tags, policy).delete] == []  # v1 names prod's digest
    cleanup = Cleanup.from_yaml(
        "policies: [{models: 'b*', deletionPolicy: Delete, old_versions: true}]", "c"
    )
    assert cleanup.policy_for("bert").old_versions is True


@pytest.mark.parametrize(
    ("option", "key"),
    [
        ("grace_hours: .inf", "grace_hours"),  # OverflowError: serve exited 70
        ("grace_hours: 1.0e+12", "grace_hours"),  # OverflowError too
        ("untagged_hours: .nan", "untagged_hours"),  # ValueError, not naming the entry
        ("grace_hours: -5", "grace_hours"),  # every push old enough
        ("grace_hours: true", "grace_hours"),  # an hour
        ("keep: true", "keep"),  # 1
        ("keep: 2.5", "keep"),  # 2
    ],
)
def test_a_retention_number_that_is_none_is_refused(option: str, key: str) -> None:
    """`keep` is a whole number, the hours a number from 0 to the CLI's most: past what a
    timedelta holds was an OverflowError at start-up (exit 70, 'a bug in modelhooks'), a
    boolean was 1, a fraction of a count rounded down."""
    text = f"policies: [{{repositories: 'r/*', streams: ['v*'], {option}}}]"
    with pytest.raises(ValueError, match=rf"policies\[0\]: {key}: a "):
        Policies.from_yaml(text, "prune.yaml")


def test_retention_numbers_as_written_still_read() -> None:
    text = "policies: [{repositories: 'r/*', keep: 3, grace_hours: 1.5, untagged_hours: 1e3}]"
    policy = Policies.from_yaml(text, "p").for_repository("r/m")  # 1e3: text to YAML 1.1
    assert policy is not None
    assert (policy.keep, policy.grace, policy.untagged) == (
        3,
        timedelta(hours=1.5),
        timedelta(hours=1000),
    )
