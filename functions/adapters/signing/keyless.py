"""Sigstore keyless signing: a short-lived Fulcio certificate for an OIDC identity, the
signature logged in Rekor (and timestamped by a TSA when configured).

Where the trust comes from, first match wins:
1. a ClientTrustConfig JSON file (trusted root + signing config), as `model_signing
   --trust_config` takes;
2. `SIGSTORE_TUF_URL` (with `SIGSTORE_TUF_ROOT`, a bootstrap root.json, for a private
   instance); `SIGSTORE_FULCIO_URL` / `SIGSTORE_REKOR_URL` / `SIGSTORE_TSA_URL` then replace
   the service URLs of its signing config;
3. the public-good instance.

The identity token is read from a file on each signature (projected service-account tokens
rotate), e.g. `/var/run/secrets/sigstore/token` with audience `sigstore`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelhooks.core.errors import ConfigError, Unavailable, VerificationFailed
from modelhooks.core.extras import require

__all__ = ["SigstoreSigner", "SigstoreTrust", "SigstoreVerifier", "sigstore_env_state"]

ENV_URLS = ("SIGSTORE_TUF_URL", "SIGSTORE_FULCIO_URL", "SIGSTORE_REKOR_URL")


def sigstore_env_state(env: Mapping[str, str] | None = None) -> str:
    """ "all", "some" or "none" of SIGSTORE_{TUF,FULCIO,REKOR}_URL are set."""
    env = os.environ if env is None else env
    count = sum(bool(env.get(name)) for name in ENV_URLS)
    return "all" if count == len(ENV_URLS) else "some" if count else "none"


@dataclass(frozen=True)
class SigstoreTrust:
    """Where to find the Sigstore instance: see the module docstring."""

    trust_config: Path | None = None
    tuf_url: str | None = None
    tuf_root: Path | None = None
    fulcio_url: str | None = None
    rekor_url: str | None = None
    tsa_url: str | None = None

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, trust_config: Path | None = None
    ) -> SigstoreTrust:
        env = os.environ if env is None else env
        root = env.get("SIGSTORE_TUF_ROOT")
        return cls(
            trust_config=trust_config,
            tuf_url=env.get("SIGSTORE_TUF_URL") or None,
            tuf_root=Path(root) if root else None,
            fulcio_url=env.get("SIGSTORE_FULCIO_URL") or None,
            rekor_url=env.get("SIGSTORE_REKOR_URL") or None,
            tsa_url=env.get("SIGSTORE_TSA_URL") or None,
        )

    def load(self) -> Any:
        """The sigstore `ClientTrustConfig` (network: TUF refresh unless a file is given)."""
        from sigstore.models import ClientTrustConfig

        try:
            if self.trust_config:
                config = ClientTrustConfig.from_json(self.trust_config.read_text())
            elif self.tuf_url:
                config = ClientTrustConfig.from_tuf(self.tuf_url, bootstrap_root=self.tuf_root)
            else:
                config = ClientTrustConfig.production()
        except OSError as e:
            raise ConfigError("cannot read the Sigstore trust config", reason=str(e)) from e
        except Exception as e:  # TUF and network errors: the instance may come back
            raise Unavailable("cannot load Sigstore trust material", reason=str(e)) from e
        self._override_services(config)
        return config

    def _override_services(self, config: Any) -> None:
        from sigstore_models.trustroot.v1 import Service

        inner = config._inner.signing_config
        for url, attr, version in (
            (self.fulcio_url, "ca_urls", 1),
            (self.rekor_url, "rekor_tlog_urls", 1),
            (self.tsa_url, "tsa_urls", 1),
        ):
            if url:
                service = Service(url=url, major_api_version=version, operator="modelhooks")
                setattr(inner, attr, [service])


class SigstoreSigner:
    """Keyless signing with an identity token read from `token_file`."""

    def __init__(self, trust: SigstoreTrust, token_file: Path) -> None:
        self._trust = trust
        self._token_file = Path(token_file)
        self._context: Any = None

    def _token(self) -> Any:
        from sigstore.oidc import IdentityToken

        try:
            return IdentityToken(self._token_file.read_text().strip())
        except OSError as e:
            raise ConfigError(f"cannot read identity token {self._token_file}") from e
        except Exception as e:  # IdentityError: expired or malformed
            raise ConfigError("invalid identity token", reason=str(e)) from e

    def identity(self) -> str:
        return f"sigstore {self._token().identity}"

    def signed(self, bundle: bytes) -> bool:
        """Whether the bundle's certificate names this token's identity (unverified: the
        bundle was ours to write; verifiers check the chain and the log)."""
        from modelhooks.adapters.signing.bundle import signer_of

        try:
            identity = str(self._token().identity)
        except ConfigError:
            return False
        return f"({identity}" in signer_of(bundle) or f" {identity})" in signer_of(bundle)

    def sign(self, statement: bytes) -> bytes:
        from sigstore.dsse import Statement
        from sigstore.sign import SigningContext

        if self._context is None:
            self._context = SigningContext.from_trust_config(self._trust.load())
        try:
            with self._context.signer(self._token(), cache=False) as signer:
                bundle = signer.sign_dsse(Statement(statement))
        except ConfigError:
            raise
        except Exception as e:  # Fulcio / Rekor / TSA answered badly or not at all
            raise Unavailable("Sigstore signing failed", reason=str(e)) from e
        return str(bundle.to_json()).encode()


class SigstoreVerifier:
    """Accepts bundles whose Fulcio certificate names `identity`, issued via `issuer`."""

    def __init__(self, trust: SigstoreTrust, identity: str, issuer: str) -> None:
        require("signing", "verifying signatures")
        self._trust = trust
        self._identity = identity
        self._issuer = issuer
        self._verifier: Any = None

    def identity(self) -> str:
        return f"sigstore {self._identity} ({self._issuer})"

    def verify(self, bundle: bytes) -> bytes:
        from sigstore.models import Bundle
        from sigstore.verify import Verifier, policy

        if self._verifier is None:
            self._verifier = Verifier(trusted_root=self._trust.load().trusted_root)
        try:
            parsed = Bundle.from_json(bundle)
            payload_type, payload = self._verifier.verify_dsse(
                parsed, policy.Identity(identity=self._identity, issuer=self._issuer)
            )
        except Exception as e:
            raise VerificationFailed("Sigstore verification failed", reason=str(e)) from e
        if payload_type != "application/vnd.in-toto+json":
            raise VerificationFailed("unexpected DSSE payload type", payload_type=payload_type)
        return bytes(payload)
