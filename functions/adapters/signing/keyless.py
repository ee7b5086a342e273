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
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from modelhooks.core.errors import (
    ConfigError,
    CredentialsRefused,
    ModelhooksError,
    Unavailable,
    VerificationFailed,
)
from modelhooks.core.extras import require

__all__ = [
    "SigstoreSigner",
    "SigstoreTrust",
    "SigstoreVerifier",
    "certificate_identity",
    "sigstore_env_state",
]

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
        """SIGSTORE_{FULCIO,REKOR,TSA}_URL replace the instance's services of that kind,
        keeping the API version and validity its signing config gives them (a private
        Rekor v2 is spoken to as v2); a kind the config lacks is added as v1."""
        from sigstore_models.trustroot.v1 import Service

        inner = config._inner.signing_config
        for url, attr in (
            (self.fulcio_url, "ca_urls"),
            (self.rekor_url, "rekor_tlog_urls"),
            (self.tsa_url, "tsa_urls"),
        ):
            if url:
                known = sorted(getattr(inner, attr), key=lambda s: s.major_api_version)
                like = known[-1] if known else None
                service = Service(
                    url=url,
                    major_api_version=like.major_api_version if like else 1,
                    valid_for=like.valid_for if like else None,
                    operator="modelhooks",
                )
                setattr(inner, attr, [service])


class SigstoreSigner:
    """Keyless signing with an identity token read from `token_file` at each signature
    (projected service-account tokens rotate).

    A token that is absent, malformed or expired, and an identity Fulcio refuses, are this
    deployment's own credentials refused (CredentialsRefused: 503 for a delivery, retried
    then dead-lettered; exit 3 on the command line), each naming what was wrong; a Fulcio,
    Rekor or TSA that does not answer is Unavailable, naming which."""

    def __init__(self, trust: SigstoreTrust, token_file: Path) -> None:
        self._trust = trust
        self._token_file = Path(token_file)
        self._context: Any = None

    def _claims(self) -> tuple[str, dict[str, Any]]:
        """The token and its claims (unverified: Fulcio verifies it), refused when absent,
        malformed or expired."""
        import jwt

        where = f"identity token {self._token_file}"
        try:
            token = self._token_file.read_text().strip()
        except OSError as e:
            raise CredentialsRefused(f"{where}: {e.strerror}", path=str(self._token_file)) from e
        try:
            claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False})
        except jwt.PyJWTError as e:
            raise CredentialsRefused(f"{where} is not a JWT: {e}") from e
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if "sigstore" not in audiences:
            raise CredentialsRefused(
                f"{where} is for audience {audience!r}, not 'sigstore' (project the token "
                "with audience sigstore)",
                path=str(self._token_file),
            )
        exp = claims.get("exp")
        if isinstance(exp, int | float) and exp <= time.time():
            at = datetime.fromtimestamp(exp, UTC).isoformat(timespec="seconds")
            raise CredentialsRefused(f"{where} expired at {at}", path=str(self._token_file))
        return token, claims

    def identity(self) -> str:
        """`sigstore <identity> (<issuer>)` as Fulcio will certify this token."""
        _, claims = self._claims()
        return f"sigstore {certificate_identity(claims)} ({claims.get('iss', '?')})"

    def signed(self, bundle: bytes) -> bool:
        """Whether the bundle's certificate names this token's identity (unverified: the
        bundle was ours to write; verifiers check the chain and the log)."""
        from modelhooks.adapters.signing.bundle import signer_of

        try:
            _, claims = self._claims()
        except CredentialsRefused:
            return False
        return f"({certificate_identity(claims)}" in signer_of(bundle)

    def sign(self, statement: bytes) -> bytes:
        from sigstore._internal.fulcio.client import FulcioClientError
        from sigstore._internal.rekor import RekorClientError
        from sigstore._internal.timestamp import TimestampError
        from sigstore.dsse import Statement
        from sigstore.oidc import IdentityToken
        from sigstore.sign import SigningContext

        token, claims = self._claims()
        try:
            identity = IdentityToken(token)
        except Exception as e:  # IdentityError: claims sigstore needs are missing
            where = f"identity token {self._token_file}"
            raise CredentialsRefused(f"{where} is not usable for Sigstore: {e}") from e
        if self._context is None:
            self._context = SigningContext.from_trust_config(self._trust.load())
        try:
            # A signer per signature, for the token just read; its key and certificate made
            # once, up front (sigstore 4.5's cache=False makes a new key at each use, so the
            # certificate's key would not be the one that signed).
            with self._context.signer(identity) as signer:
                bundle = signer.sign_dsse(Statement(statement))
        except FulcioClientError as e:
            subject = certificate_identity(claims)
            raise _fulcio_error(e, subject, str(claims.get("iss", "?"))) from e
        except RekorClientError as e:
            raise Unavailable(
                "the transparency log (Rekor) refused or failed", reason=str(e)
            ) from e
        except TimestampError as e:
            raise Unavailable("the timestamp authority failed", reason=str(e)) from e
        except Exception as e:  # a service that did not answer at all
            raise Unavailable("Sigstore signing failed", reason=str(e)) from e
        return str(bundle.to_json()).encode()


def certificate_identity(claims: Mapping[str, Any]) -> str:
    """The identity Fulcio certifies for a token: a Kubernetes ServiceAccount's URI (its
    `kubernetes` issuer type), else the token's email or subject."""
    k8s = claims.get("kubernetes.io")
    if isinstance(k8s, Mapping):
        account = k8s.get("serviceaccount")
        name = account.get("name") if isinstance(account, Mapping) else None
        if k8s.get("namespace") and name:
            return f"https://kubernetes.io/namespaces/{k8s['namespace']}/serviceaccounts/{name}"
    return str(claims.get("email") or claims.get("sub") or "?")


def _fulcio_error(error: Exception, subject: str, issuer: str) -> ModelhooksError:
    """Fulcio refusing the identity (4xx: our credentials) or not answering (transient)."""
    reason = str(error) or str(error.__cause__)
    status = getattr(getattr(error.__cause__, "response", None), "status_code", None)
    if status in (400, 401, 403):
        return CredentialsRefused(
            f"Fulcio refused the identity {subject} of issuer {issuer}",
            subject=subject,
            issuer=issuer,
            reason=reason,
        )
    return Unavailable("Fulcio did not issue a certificate", reason=reason)


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
