"""Property: notify told a Model's cleanup refusals, each report under one or more CloudEvent
ids (a redelivery; its echo: a status write is an update of the deleting Model, cleanup runs
again and reports anew), in any order, one of the deliveries broken off between its status
write and its Warning Event (serve killed) and delivered again: the Model ends with exactly
one Warning Event per distinct report, and CleanupFailed True saying one of them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from modelhooks.core.conditions import FINALIZER
from modelhooks.events.model import ArtifactPurged, CanonicalEvent
from modelhooks.handlers.notify import handle as notify
from tests.contract.cluster import model
from tests.fakes.memory_cluster import InMemoryCluster

NS = "ml"
T0 = datetime(2026, 11, 1, tzinfo=UTC)
SUBJECT = f"/apis/modelhooks.dev/v1alpha1/namespaces/{NS}/models/bert"
REPORTS = {"secret": "not_found: no Secret 'creds'", "tenancy": "forbidden: not ml's"}


class _Killed(Exception):
    """serve SIGKILLed: what the delivery had not done yet is not done."""


class _Crashing(InMemoryCluster):
    """Its `crash_at`-th Event is not recorded: the delivery is broken off there."""

    crash_at = -1

    def record(self, event: Any) -> bool:
        self.crash_at -= 1
        if self.crash_at == -1:
            raise _Killed
        return super().record(event)


deliveries = st.lists(
    st.tuples(st.sampled_from(sorted(REPORTS)), st.integers(0, 2)), min_size=1, max_size=8
)


@settings(max_examples=80, deadline=None)
@given(deliveries, st.integers(-1, 6))
def test_one_warning_per_distinct_report_whatever_the_order_and_a_kill(
    order: list[tuple[str, int]], crash_at: int
) -> None:
    cluster = _Crashing()
    cluster.create(NS, model("bert", finalizers=[FINALIZER, "example.com/hold"]))
    cluster.delete(NS, "bert")
    cluster.crash_at = crash_at
    for report, echo in order:
        data = ArtifactPurged(uri="", model="bert", policy="Delete", namespace=NS,
                              refused=REPORTS[report])  # fmt: skip
        event = CanonicalEvent(id=f"{report}-{echo}", source="cleanup", type=data.TYPE,
                               data=data, time=T0, subject=SUBJECT)  # fmt: skip
        try:
            notify(event, cluster=cluster, rollout=False)
        except _Killed:  # restarted, the platform delivers it again
            notify(event, cluster=cluster, rollout=False)
    warnings = [e for e in cluster.events.values() if e.type == "Warning"]
    assert sorted(e.note for e in warnings) == sorted({w.note for w in warnings}), (
        "a report told twice"
    )
    told = {report for report, _ in order}
    assert len(warnings) == len(told), (order, crash_at, [e.note for e in warnings])
    found = cluster.get_model(NS, "bert")
    assert found is not None
    (condition,) = [c for c in found["status"]["conditions"] if c["type"] == "CleanupFailed"]
    assert condition["status"] == "True" and condition["reason"] == "CleanupRefused"
