"""The verifiers of what a VerificationPolicy trusts: its inline keys and certificate chains
(model-signing's verifiers, loaded from the PEM), its keyless identities (a Sigstore bundle
whose verified Fulcio certificate names an accepted identity, exact or by regular
expression). Built by admission once per policy version.

>>> verifiers_for(policy, trust_config="")  # doctest: +SKIP
[<KeyVerifier …>, <_KeylessVerifier …>]
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from modelhooks.adapters.signing.bundle import fulcio_issuer
from modelhooks.core.errors import ConfigError, VerificationFailed
from modelhooks.core.ports import Verifier
from modelhooks.core.verification import Identity, Policy

__all__ = ["verifiers_for"]


def verifiers_for(policy: Policy, trust_config: str) -> list[Verifier]:
    """Every verifier of `policy` (VerificationFailed naming a key or chain it cannot load)."""
    from modelhooks.adapters.signing.keys import CertificateVerifier, KeyVerifier

    made: list[Verifier] = []
    for name, pem in (*policy.keys, *policy.chains):
        if not pem:  # public material needs no Secret; admission reads none
            raise VerificationFailed(
                f"{policy.shown}: {name} names a secretRef, which admission does not read: "
                "put the PEM inline (spec.keys[].pem, spec.certificateChains[].pem)"
            )
    with tempfile.TemporaryDirectory(prefix="modelhooks-policy-") as tmp:
        for i, (name, pem) in enumerate(policy.keys):
            made.append(_loaded(KeyVerifier, _file(tmp, f"key{i}.pem", pem), policy, name))
        for i, (name, pem) in enumerate(policy.chains):
            chain = [_file(tmp, f"chain{i}.pem", pem)]
            made.append(_loaded(CertificateVerifier, chain, policy, name))
    if policy.identities:
        made += _identities(policy, trust_config)
    return made


def _identities(policy: Policy, trust_config: str) -> list[Verifier]:
    from modelhooks.adapters.signing.keyless import SigstoreTrust

    trust = SigstoreTrust.from_env(trust_config=Path(trust_config) if trust_config else None)
    return [_KeylessVerifier(trust, identity) for identity in policy.identities]


class _KeylessVerifier:
    """A Sigstore bundle whose Fulcio certificate names an identity the policy accepts:
    subject and issuer each exact or matched in full by a regular expression
    (modelhooks.core.verification.Identity), over the verified certificate."""

    def __init__(self, trust: Any, identity: Identity) -> None:
        self._trust, self._identity = trust, identity
        self._verifier: Any = None

    def identity(self) -> str:
        return f"sigstore {self._identity}"

    def verify(self, bundle: bytes) -> bytes:
        from sigstore.models import Bundle

        if self._verifier is None:
            from sigstore.verify import Verifier as SigstoreVerifier

            self._verifier = SigstoreVerifier(trusted_root=self._trust.verifying_root())
        try:
            parsed = Bundle.from_json(bundle)
            payload_type, payload = self._verifier.verify_dsse(parsed, _Accepts(self._identity))
        except Exception as e:
            raise VerificationFailed("Sigstore verification failed", reason=str(e)) from e
        if payload_type != "application/vnd.in-toto+json":
            raise VerificationFailed("unexpected DSSE payload type", payload_type=payload_type)
        return bytes(payload)


class _Accepts:
    """sigstore's VerificationPolicy protocol over an Identity."""

    def __init__(self, identity: Identity) -> None:
        self._identity = identity

    def verify(self, cert: Any) -> None:
        from cryptography import x509
        from sigstore.errors import VerificationError

        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            names = [str(n.value) for n in san]
        except x509.ExtensionNotFound:
            names = []
        issuer = fulcio_issuer(cert) or ""
        if not any(self._identity.accepts(issuer, name) for name in names):
            raise VerificationError(
                f"certificate identity {', '.join(names) or '?'} ({issuer or 'no issuer'}) "
                f"is not {self._identity}"
            )


def _file(tmp: str, name: str, pem: str) -> Path:
    path = Path(tmp) / name
    path.write_text(pem)
    return path


def _loaded(kind: Any, material: Any, policy: Policy, name: str) -> Verifier:
    try:
        verifier: Verifier = kind(material)
    except ConfigError as e:
        raise VerificationFailed(
            f"{policy.shown}: {name} cannot be loaded ({e.details.get('reason', e.message)})"
        ) from None
    return verifier
