"""The sign Service's identity for keyless signing: a service-account token projected with
audience `sigstore` (what Fulcio's `kubernetes` issuer accepts and what the signer checks),
short-lived, read-only, at the file MODELHOOKS_SIGNING_IDENTITY_TOKEN names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from modelhooks.adapters.signing.config import SigningConfig
from modelhooks.core.settings import load_settings

SERVICES = Path(__file__).resolve().parents[2] / "infra" / "knative" / "services.yaml"


def _sign_service() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(SERVICES.read_text()) if d]
    (service,) = [d for d in docs if d["metadata"]["name"] == "modelhooks-sign"]
    return service


def test_sign_gets_a_projected_sigstore_token_where_its_setting_points() -> None:
    spec = _sign_service()["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = {v["name"]: v.get("value") for v in container["env"]}
    token = Path(env["MODELHOOKS_SIGNING_IDENTITY_TOKEN"])
    (mount,) = [m for m in container["volumeMounts"] if token.is_relative_to(m["mountPath"])]
    assert mount.get("readOnly") is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    (source,) = volume["projected"]["sources"]
    projected = source["serviceAccountToken"]
    assert projected["audience"] == "sigstore"
    assert 600 <= projected["expirationSeconds"] <= 3600  # the kubelet's floor; short-lived
    assert str(token.relative_to(mount["mountPath"])) == projected["path"]
    # the setting reaches the signer as that file
    settings = load_settings(env={"MODELHOOKS_SIGNING_IDENTITY_TOKEN": str(token)})
    config = SigningConfig.from_settings(settings.signing, ready_marker="_")
    assert config.identity_token == token
