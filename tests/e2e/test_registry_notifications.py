"""OCI registry notifications → `modelhooks serve` → register, on real registries:
distribution 2.8 and v3 (their notification envelopes) and zot (CloudEvents)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
import requests

from tests.e2e.conftest import Served
from tests.integration.test_smoke_oci import push_artifact
from tests.servers.registries import OciRegistry

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture(params=["docker_registry", "distribution3", "zot"])
def registry(request: pytest.FixtureRequest) -> OciRegistry:
    reg: OciRegistry = request.getfixturevalue(request.param)
    return reg


def serve_for(
    registry: OciRegistry, serve: Callable[..., Served], kinds: str, *more: str
) -> Served:
    """`modelhooks serve` on the port `registry` notifies, its route taking `kinds` only."""
    path = f"/{registry.kind}-events"
    return serve(
        registry.notify_port,
        "--ingress-route-auth",
        f"{path}=bearer:token={registry.notify_token}",
        "--ingress-auth",
        "bearer:token=only-for-the-routes-above",
        "--ingress-registry-host",
        registry.host,
        "--ingress-route-kinds",
        f"{path}={kinds}",
        "--store-allow-local-targets",
        "true",  # the registry listens on loopback here
        *more,
    )


def test_a_pushed_model_gets_registered_and_blobs_are_ignored(
    registry: OciRegistry, serve: Callable[..., Served]
) -> None:
    served = serve_for(registry, serve, "oci,zot")  # registry notifications only
    repo = f"e2e/{uuid.uuid4().hex[:8]}"
    with requests.Session() as http:
        digest = push_artifact(http, registry, repo, "v1", {"weights.bin": b"w" * 2048})

    def ours() -> list[dict[str, str]]:
        # The registry is session-wide: distribution redelivers earlier tests' notifications
        # (nobody listened then) to whoever listens now, so look at this repository only.
        return [r for r in served.registrations() if r["model"] == repo]

    rows = served.wait_for("the registration", ours, timeout=60)  # after that backlog
    assert [(r["model"], r["version"], r["digest"]) for r in rows] == [(repo, "v1", digest)]
    assert rows[0]["uri"] == f"oci://{registry.host}/{repo}@{digest}"
    # Blob pushes were notified too (distribution) but registered nothing of their own.
    assert len(ours()) == 1


@pytest.mark.parametrize("kind", ["docker_registry", "distribution3"])
def test_a_notification_refused_for_good_does_not_hold_back_the_next(
    kind: str, request: pytest.FixtureRequest, serve: Callable[..., Served]
) -> None:
    """distribution retries every answer but 2xx/3xx, for ever, and what it notifies next
    waits behind it: a push the route's tenant may not act on (403) held back every later
    notification of the registry. It is answered 200 with why; the next push registers."""
    registry: OciRegistry = request.getfixturevalue(kind)
    run = uuid.uuid4().hex[:8]
    served = serve_for(
        registry,
        serve,
        "oci",
        "--ingress-route-namespaces",
        f"/{registry.kind}-events=team-a",
        "--tenancy-tenants",
        f"team-a=oci://{registry.host}/allowed-{run}/*",
    )
    with requests.Session() as http:
        push_artifact(http, registry, f"denied-{run}/m", "v1", {"weights.bin": b"d" * 2048})
        digest = push_artifact(
            http, registry, f"allowed-{run}/m", "v1", {"weights.bin": b"a" * 2048}
        )

    def registered() -> list[dict[str, str]]:
        return [r for r in served.registrations() if r["model"].endswith(f"-{run}/m")]

    rows = served.wait_for("the allowed push's registration", registered, timeout=60)
    assert [(r["model"], r["digest"]) for r in rows] == [(f"allowed-{run}/m", digest)]
