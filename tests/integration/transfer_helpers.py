"""What the transfer tests (integration and e2e) share: an OCI model pulled as a Pod mounting
the image sees it, and upstream's `model_signing verify sigstore` run over it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.transfer.oci import OciEnd
from tests.servers.sigstore import Sigstore

BIN = Path(sys.executable).parent


def image_files(uri: str) -> dict[str, bytes]:
    """The files of the model image at `uri` (oci://host/repo:tag or host/repo:tag)."""
    client, repo, ref = OciClients().for_uri(uri)
    return {e.path: e.open(0).read() for e in OciEnd(client, repo, ref).files()}


def pull(uri: str, dest: Path) -> Path:
    """The model image's files written into `dest` (created), as under a Pod's /models."""
    dest.mkdir()
    for path, data in image_files(uri).items():
        (dest / path).write_bytes(data)
    return dest


def upstream_verify(
    model: Path, identity: str, sigstore: Sigstore, home: Path
) -> subprocess.CompletedProcess[str]:
    """Upstream's `model_signing verify sigstore` of `model`/model.sig for `identity`."""
    return subprocess.run(
        [
            str(BIN / "model_signing"), "verify", "sigstore", str(model),
            "--signature", str(model / "model.sig"),
            "--identity", identity,
            "--identity_provider", sigstore.issuer,
            "--trust_config", str(sigstore.trust_config),
        ],
        capture_output=True, text=True, env={"PATH": os.environ["PATH"], "HOME": str(home)},
        timeout=120,
    )  # fmt: skip
