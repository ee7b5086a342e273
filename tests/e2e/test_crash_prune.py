"""`modelhooks serve` SIGKILLed after prune deleted and answered, before the delivery log's
group commit wrote its record (the kill lands there almost always), on the real
distribution v3: the platform delivers the prune request again to the restarted serve. It
is answered as the first time, the same tags deleted (it listed again, found them gone and
answered nothing deleted: notify's Event on the Model was lost)."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.events.model import CanonicalEvent, PruneRequested
from tests.e2e.conftest import Served
from tests.e2e.crash import body_of
from tests.e2e.packaging import free_port
from tests.e2e.test_crash_chains import _answer, _recorded
from tests.integration.test_prune_cli import push
from tests.servers.registries import OciRegistry

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

OLD = datetime(2026, 1, 1, tzinfo=UTC)


def test_prune_killed_before_its_record_answers_its_redelivery_as_the_first_time(
    distribution3: OciRegistry, serve: Callable[..., Served], tmp_path: Path
) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        f"policies:\n  - repositories: '{distribution3.host}/crash-prune/*'\n"
        "    streams: ['v*']\n    keep: 2\n    grace_hours: 0\n"
    )
    port = free_port()
    home = tmp_path / f"home-{port}"
    flags = ("--store-allow-local-targets", "true", "--prune-policy-file", str(policies))
    client = DistributionRegistry(distribution3.url)
    served = serve(port, *flags)
    for attempt in range(20):  # the kill lands before the group commit almost always
        repo = f"crash-prune/{uuid.uuid4().hex[:8]}"
        for tag in ("v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0"):
            push(client, repo, tag, created=OLD)
        data = PruneRequested(uri=f"oci://{distribution3.host}/{repo}")
        event = CanonicalEvent.new(data, source="/schedule", id=f"tick-{attempt}-{repo}")
        first = _answer(f"{served.url}/functions/prune", body_of(event))
        os.kill(served.process.pid, signal.SIGKILL)
        served.process.wait(timeout=10)
        if not _recorded(home, event.id):
            break
        served = serve(port, *flags)
    else:
        pytest.fail("every record was written before the kill")
    assert first[0] == 200 and first[2]["deleted"] == ["v1.0.0", "v1.1.0"], first
    assert sorted(client.tags(repo)) == ["v1.2.0", "v1.3.0"]

    again = serve(port, *flags)
    assert _answer(f"{again.url}/functions/prune", body_of(event)) == first
