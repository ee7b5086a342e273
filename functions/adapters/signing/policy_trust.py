"""The verifiers of what a VerificationPolicy trusts: its inline keys and certificate chains
(model-signing's verifiers, loaded from the PEM), its keyless identities (a Sigstore bundle
whose verified Fulcio certificate names an accepted identity, exact or by regular
expression). Built by admission once per policy version, and by `modelhooks verify
--trust-json` (the init containers of `verifyOn: node` policies) as one verifier per policy
accepting a signature ANY of its keys, chains or identities verifies, and, for a volume
several policies cover, one accepting it when EVERY one of those does.

>>> verifiers_for(policy, trust_config="")  # doctest: +SKIP
[<KeyVerifier …>, <SigstoreVerifier …>]
>>> trusted({"keys": [{"name": "team", "pem": PEM}]}, trust_config="")  # doctest: +SKIP
<AnyOf key team>
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from modelhooks.adapters.signing.bundle import fulcio_issuer
from modelhooks.core.errors import ConfigError, VerificationFailed
from modelhooks.core.ports import Verifier
from modelhooks.core.verification import Identity, Policy

__all__ = ["AllOf", "AnyOf", "trusted", "verifiers_for"]


def verifiers_for(
    policy: Policy, trust_config: str, trusted_root: Path | None = None
) -> list[Verifier]:
    """Every verifier of `policy` (VerificationFailed naming a key or chain it cannot load);
    its identities verify against `trusted_root` (a trusted_root.json) when given, else
    against `trust_config` or the Sigstore environment."""
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
        made += _identities(policy, trust_config, trusted_root)
    return made


def trusted(spec: Any, trust_config: str) -> Verifier:
    """One verifier of what a VerificationPolicy spec trusts (its keys, certificateChains and
    identities: ANY of them may have signed), or of `{"allOf": [spec, …]}` (each spec named
    by its `name`: the init container of a volume several `verifyOn: node` policies cover),
    which EVERY one of those specs must accept; ConfigError when it is neither, or a spec
    trusts nothing. A `trustedRoot` beside them (the admission function's private Sigstore
    root, as the mutating webhook passes it) is what the identities verify against, before
    `trust_config`."""
    if not isinstance(spec, dict):
        raise ConfigError("the trust is not a JSON object of keys, certificateChains, identities")
    spec = dict(spec)
    groups = spec.pop("allOf", None)
    if groups is None:
        root = _root_file(spec.pop("trustedRoot", None))
        return _any_of(spec, "", trust_config, root)
    if set(spec) - {"trustedRoot"}:
        raise ConfigError(
            "the trust's allOf has no keys, certificateChains or identities beside it, "
            f"only trustedRoot: found {', '.join(sorted(set(spec) - {'trustedRoot'}))}"
        )
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
        raise ConfigError(
            "the trust's allOf is not a non-empty list of JSON objects (one per policy)"
        )
    root = _root_file(spec.pop("trustedRoot", None))
    made = []
    for i, group in enumerate(groups):
        group = dict(group)
        name = group.pop("name", None)
        made.append(_any_of(group, str(name) if name else f"allOf[{i}]", trust_config, root))
    return AllOf(made)


def _any_of(spec: dict[str, Any], name: str, trust_config: str, root: Path | None) -> AnyOf:
    which = f"the trust's {name}" if name else "the trust"
    try:
        policy = Policy.from_resource({"metadata": {"name": "trust"}, "spec": spec})
    except ConfigError:
        raise ConfigError(f"{which} names no keys, certificateChains or identities") from None
    except (KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"{which} is not a VerificationPolicy spec: {e!r}") from None
    try:
        return AnyOf(policy.trusts(), verifiers_for(policy, trust_config, root), name)
    except VerificationFailed as e:
        raise ConfigError(e.message) from None


def _root_file(root: Any) -> Path | None:
    """`root` (a trusted root, JSON) in a file of this process's, removed at exit."""
    if root is None:
        return None
    if not isinstance(root, dict):
        raise ConfigError("the trust's trustedRoot is not a JSON object (a trusted_root.json)")
    import atexit
    import json
    import os

    fd, name = tempfile.mkstemp(prefix="modelhooks-trusted-root-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(root, f)
    atexit.register(Path(name).unlink, missing_ok=True)
    return Path(name)


class AnyOf:
    """A bundle is accepted when any of `verifiers` verifies it (a policy's trust)."""

    def __init__(self, shown: str, verifiers: list[Verifier], name: str = "") -> None:
        self._shown, self._verifiers, self.name = shown, verifiers, name

    def identity(self) -> str:
        return self._shown

    def verify(self, bundle: bytes) -> bytes:
        reasons = []
        for verifier in self._verifiers:
            try:
                return verifier.verify(bundle)
            except VerificationFailed as e:
                reasons.append(f"{verifier.identity()}: {e.details.get('reason', e.message)}")
        raise VerificationFailed(
            f"no signer it trusts ({self._shown}) signed it", reasons="; ".join(reasons)
        )


class AllOf:
    """A bundle is accepted when EACH of `groups` accepts it (a volume several policies
    cover: every one must be satisfied; sigstore-python's AllOf of policies)."""

    def __init__(self, groups: list[AnyOf]) -> None:
        if not groups:  # as sigstore's AllOf([]): likely misuse, never "accept all"
            raise ConfigError("the trust's allOf names no policy")
        self._groups = groups

    def identity(self) -> str:
        return "; ".join(f"{g.name}: {g.identity()}" for g in self._groups)

    def verify(self, bundle: bytes) -> bytes:
        statement = b""
        for group in self._groups:
            try:
                statement = group.verify(bundle)
            except VerificationFailed as e:
                raise VerificationFailed(
                    f"{group.name} is not satisfied: {e.message}", **e.details
                ) from None
        return statement


def _identities(policy: Policy, trust_config: str, trusted_root: Path | None) -> list[Verifier]:
    from modelhooks.adapters.signing.keyless import SigstoreTrust, SigstoreVerifier

    if trusted_root:
        trust = SigstoreTrust(trusted_root=trusted_root)
    else:
        trust = SigstoreTrust.from_env(trust_config=Path(trust_config) if trust_config else None)
    return [
        SigstoreVerifier(trust, *_named(identity), accepts=_Accepts(identity))
        for identity in policy.identities
    ]


def _named(identity: Identity) -> tuple[str, str]:
    """(subject, issuer) as shown: exact, or `~regexp`."""
    return (
        identity.subject or f"~{identity.subject_regexp}",
        identity.issuer or f"~{identity.issuer_regexp}",
    )


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
