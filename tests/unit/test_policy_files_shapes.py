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
