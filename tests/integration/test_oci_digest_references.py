"""An OCI reference's digest is one the registries take: sha256 or sha512, in the lower-case
hex of its size (image-spec descriptor.md), as the event sources check a notification's
(events.sources._oci). Anything else is a 400 (the CLI's exit 2) naming the reference before
any request: the registries answer such a manifest request 400, which reads as the registry
failing (Unavailable: a 503, redelivered until dead-lettered)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core.errors import BadRequest
from tests.integration.test_oci_registry import image
from tests.unit.signing_material import make_key

pytestmark = pytest.mark.integration


@pytest.fixture(params=["docker_registry", "distribution3", "ociregistry"])
def registry(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def _hostile(digest: str) -> list[str]:
    hex_ = digest.removeprefix("sha256:")
    return [
        "md5:abc",  # an algorithm no registry takes
        f"blake3:{hex_}",
        f"sha512:{hex_}",  # sha512's hex is 128 long
        f"sha256:{hex_.upper()}",  # upper-case hex
        f"sha256:{hex_[:-1]}",
    ]


def test_a_digest_no_registry_takes_is_refused_naming_it(registry: Any, tmp_path: Path) -> None:
    from modelhooks.cli import main

    client, repo = DistributionRegistry(registry.url), f"digests/{uuid.uuid4().hex[:8]}"
    digest = image(client, repo, "v1", b"weights")
    key = make_key(tmp_path, "k").public
    for ref in _hostile(digest):
        uri = f"oci://{registry.host}/{repo}@{ref}"
        with pytest.raises(BadRequest, match="digest"):
            OciClients().for_uri(uri)
        assert main(["verify", uri, "--public-key", str(key), "--quiet"]) == 2, ref
    # the digest as pushed still reads
    found, _, _ = OciClients().for_uri(f"oci://{registry.host}/{repo}@{digest}")
    assert found.manifest(repo, digest)[1] == digest
