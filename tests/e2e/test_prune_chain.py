"""oras push → the registry's webhook → `modelhooks serve` (ingress) → register and prune, on
the harness registries that send notifications. While every version is registered and live,
prune deletes nothing (a live version's digest is in use); once the model is deleted (its
versions archived), the next push prunes the older tags beyond the policy, keeping the
newest and the protected, and the manifests."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from modelhooks.adapters.oci.distribution import DistributionRegistry
from tests.e2e.conftest import Served
from tests.servers.recipes import RECIPES
from tests.servers.registries import OciRegistry

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture(params=["distribution3", "docker_registry"])
def registry(request: pytest.FixtureRequest) -> OciRegistry:
    """Both notify: distribution v3 deletes by tag; 2.8 refuses, so the untag workaround's
    placeholder push and delete are notified too (and must change nothing)."""
    found: OciRegistry = request.getfixturevalue(request.param)
    return found


def test_pushes_with_oras_are_pruned_by_policy(
    registry: OciRegistry, serve: Callable[..., Served], tmp_path: Path
) -> None:
    repo = f"prune-e2e/{uuid.uuid4().hex[:8]}"
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        f"policies:\n  - repositories: '{registry.host}/prune-e2e/*'\n"
        "    streams: ['v*']\n    keep: 2\n    grace_hours: 0\n"
    )
    path = f"/{registry.kind}-events"
    served = serve(
        registry.notify_port,
        "--ingress-route-auth", f"{path}=bearer:token={registry.notify_token}",
        "--ingress-auth", "bearer:token=only-for-the-routes-above",
        "--ingress-route-kinds", f"{path}=oci;/replay=canonical",
        "--store-allow-local-targets", "true",
        "--prune-policy-file", str(policies),
    )  # fmt: skip
    model = tmp_path / "model"
    model.mkdir()

    def oras_push(tag: str) -> None:
        (model / "weights.bin").write_text(tag)  # other content per tag
        pushed = subprocess.run(
            [str(RECIPES["oras"].binary()), "push", "--plain-http", f"{registry.host}/{repo}:{tag}",
             "weights.bin"],
            cwd=model, capture_output=True, text=True,
        )  # fmt: skip
        assert pushed.returncode == 0, pushed.stderr

    def registered() -> list[str]:
        return sorted(r["version"] for r in served.registrations() if r["model"] == repo)

    client = DistributionRegistry(registry.url)
    tags = ["latest", "v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0"]
    for n, tag in enumerate(tags, 1):  # one by one: a tag not yet registered is not in use
        oras_push(tag)
        served.wait_for(
            f"{tag} registered", lambda n=n: registered() == sorted(tags[:n]), timeout=60
        )
    assert sorted(client.tags(repo)) == tags  # all live: all in use, nothing pruned

    deleted = {
        "specversion": "1.0", "id": f"del-{repo}", "source": "/e2e", "time": _now(),
        "type": "dev.modelhooks.model.deleted", "data": {"name": repo},
    }  # fmt: skip
    answer = requests.post(
        f"{served.url}/replay",
        json=deleted,
        headers={"Authorization": "Bearer only-for-the-routes-above"},
        timeout=30,
    )
    assert answer.status_code < 300, answer.text
    oras_push("v1.4.0")  # pushed after the deletion: the one live version
    remaining = served.wait_for(
        "the older tags to be pruned",
        lambda: (t := sorted(client.tags(repo))) == ["latest", "v1.3.0", "v1.4.0"] and t,
        timeout=60,
    )
    assert remaining == ["latest", "v1.3.0", "v1.4.0"]
    ours = [r for r in _outcomes(served.log) if f"/{repo}@" in str(r.get("uri", ""))]
    assert ours  # register and prune answered each of our pushes
    failed = [r for r in ours if r["outcome"] not in ("ok", "duplicate", "skipped")]
    assert not failed, failed  # on 2.8 the untag placeholder's notifications were refused


def _outcomes(log: Path) -> list[dict[str, object]]:
    records = (json.loads(line) for line in log.read_text().splitlines() if line.startswith("{"))
    return [r for r in records if "outcome" in r]


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat()
