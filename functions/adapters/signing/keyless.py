"""Sigstore keyless signing: a short-lived Fulcio certificate for an OIDC identity, the
signature logged in Rekor (and timestamped by a TSA when configured). Where the instance's
trust comes from (a trust config, a trusted root, TUF, SIGSTORE_* URLs): `trust.py`.

The identity token is read from a file on each signature (projected service-account tokens
rotate), e.g. `/var/run/secrets/sigstore/token` with audience `sigstore`.

Errors name the piece that failed: the token (absent, malformed, expired, another
audience) and an identity Fulcio refuses are CredentialsRefused (the deployment's own
credential: 503 for a delivery, retried then dead-lettered for a replay once fixed; exit 3
on the command line); Fulcio, Rekor or the TSA not answering or failing is Unavailable
naming the service and its URL; a malformed trust config is a ConfigError naming the file
and the field.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from modelhooks.adapters.signing.trust import ENV_URLS, SigstoreTrust, sigstore_env_state
from modelhooks.core.errors import (
    CredentialsRefused,
    ModelhooksError,
    Unavailable,
    VerificationFailed,
)
from modelhooks.core.extras import require

__all__ = [
    "ENV_URLS",
    "SigstoreSigner",
    "SigstoreTrust",
    "SigstoreVerifier",
    "certificate_identity",
    "sigstore_env_state",
]


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
        self._signer: tuple[str, Any] | None = None  # (token, sigstore Signer): _signer_for
        self._expires = 0.0  # when the kept signer's certificate expires

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
        """Whether the bundle's certificate names this token's identity and issuer
        (unverified: the bundle was ours to write; verifiers check the chain and the log)."""
        from modelhooks.adapters.signing.bundle import signer_of

        try:
            return signer_of(bundle) == self.identity()  # identity and issuer
        except CredentialsRefused:
            return False

    def sign(self, statement: bytes) -> bytes:
        import requests
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
            with _Warnings("sigstore.sign") as warnings:
                signer = self._signer_for(token, identity)
                bundle = signer.sign_dsse(Statement(statement))
                self._expires = bundle.signing_certificate.not_valid_after_utc.timestamp()
        except FulcioClientError as e:
            subject = certificate_identity(claims)
            issuer = str(claims.get("iss", "?"))
            raise _fulcio_error(e, self._context._fulcio.url, subject, issuer) from e
        except RekorClientError as e:
            url = getattr(self._context._rekor, "url", "?")
            raise Unavailable(
                f"the transparency log (Rekor {url}) refused or failed: {e}", url=url
            ) from e
        except TimestampError as e:
            raise Unavailable("the timestamp authority failed", reason=str(e)) from e
        except requests.RequestException as e:  # a service that did not answer at all
            url = str(getattr(e.request, "url", "") or "?")
            raise Unavailable(f"{self._service(url)} {url} did not answer: {e}", url=url) from e
        except Exception as e:
            self._check_timestamped(None, warnings.messages)
            raise Unavailable("Sigstore signing failed", reason=str(e)) from e
        document = str(bundle.to_json())
        self._check_timestamped(document, warnings.messages)
        return document.encode()

    def _check_timestamped(self, document: str | None, warnings: list[str]) -> None:
        """sigstore-python only logs a TSA's failure and goes on (then fails to assemble a
        Rekor v2 bundle, whose entries carry no time): name the TSA and why."""
        tsas = [c.url for c in self._context._tsa_clients]
        if tsas and (document is None or '"rfc3161Timestamps"' not in document):
            why = next((w for w in warnings if "timestamp" in w), "")
            if why or document is not None:
                raise Unavailable(
                    f"the timestamp authority {', '.join(tsas)} gave no timestamp",
                    url=tsas[0],
                    reason=why,
                )

    def _signer_for(self, token: str, identity: Any) -> Any:
        """A sigstore Signer for this token: its key and Fulcio certificate made once, up
        front, and kept for the next signatures while the token file holds the same token
        and the certificate has a minute left (a certificate costs a Fulcio round trip and
        a CT log entry). Not cache=False: sigstore 4.5 then makes a new key at each use, so
        the certificate's key would not be the one that signed."""
        from sigstore.sign import Signer

        kept = self._signer
        if kept is not None and kept[0] == token and time.time() < self._expires - 60:
            return kept[1]
        signer = Signer(identity, self._context)
        self._signer, self._expires = (token, signer), time.time() + 120
        return signer

    def _service(self, url: str) -> str:
        """Which Sigstore service `url` (a request that failed) belongs to."""
        rekor = str(getattr(self._context._rekor, "url", ""))
        tsas = [c.url for c in self._context._tsa_clients]
        if rekor and url.startswith(rekor):
            return "the transparency log (Rekor)"
        if any(url.startswith(t) for t in tsas):
            return "the timestamp authority"
        return "the certificate authority (Fulcio)"


class _Warnings(logging.Handler):
    """The warnings `logger` emits in this thread while the block runs."""

    def __init__(self, logger: str) -> None:
        super().__init__(logging.WARNING)
        self._logger = logging.getLogger(logger)
        self._thread = threading.get_ident()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self._thread:
            self.messages.append(record.getMessage())

    def __enter__(self) -> _Warnings:
        self._logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)


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


def _fulcio_error(error: Exception, url: str, subject: str, issuer: str) -> ModelhooksError:
    """Fulcio refusing the identity (4xx: our credentials) or failing (transient)."""
    response = getattr(error.__cause__, "response", None)
    status = getattr(response, "status_code", None)
    # sigstore-python drops Fulcio's message for any error status: read it from the answer
    reason = (getattr(response, "text", "") or str(error) or str(error.__cause__)).strip()[:500]
    if status in (400, 401, 403):
        return CredentialsRefused(
            f"Fulcio refused the identity {subject} of issuer {issuer} (at {url})",
            subject=subject,
            issuer=issuer,
            reason=reason,
        )
    return Unavailable(f"Fulcio {url} did not issue a certificate (HTTP {status})", reason=reason)


class SigstoreVerifier:
    """Accepts bundles whose Fulcio certificate names `identity`, issued via `issuer`; or,
    given `accepts` (a sigstore VerificationPolicy: e.g. a policy's identity by regular
    expression), whatever it accepts, `identity` and `issuer` then only naming it."""

    def __init__(
        self, trust: SigstoreTrust, identity: str, issuer: str, *, accepts: Any = None
    ) -> None:
        require("signing", "verifying signatures")
        self._trust = trust
        self._identity = identity
        self._issuer = issuer
        self._accepts = accepts
        self._verifier: Any = None

    def identity(self) -> str:
        return f"sigstore {self._identity} ({self._issuer})"

    def verify(self, bundle: bytes) -> bytes:
        from sigstore.models import Bundle
        from sigstore.verify import Verifier, policy

        if self._verifier is None:
            self._verifier = Verifier(trusted_root=self._trust.verifying_root())
        try:
            parsed = Bundle.from_json(bundle)
            accepts = self._accepts or policy.Identity(identity=self._identity, issuer=self._issuer)
            payload_type, payload = self._verifier.verify_dsse(parsed, accepts)
        except Exception as e:
            raise VerificationFailed("Sigstore verification failed", reason=str(e)) from e
        if payload_type != "application/vnd.in-toto+json":
            raise VerificationFailed("unexpected DSSE payload type", payload_type=payload_type)
        return bytes(payload)
