"""Verification policies, the verdict cache and the ports admission decides through.

A `Policy` is a VerificationPolicy (namespaced) or ClusterVerificationPolicy read from the
cluster (infra/k8s/crds): what it trusts (keys, certificate chains, keyless identities),
which workloads (label selector) and models (reference globs) it covers, its mode
(`enforce` denies, `warn` admits with a warning), its failurePolicy (what to answer
when verification cannot complete: `Fail` denies, `Ignore` admits with a warning) and where it
verifies (`verifyOn`: at admission, or on the node by an init container). A
policy that trusts nothing is refused (by the CRD's CEL rule, and here again).

>>> p = Policy.from_resource({"metadata": {"name": "p", "uid": "u", "resourceVersion": "1"},
...     "spec": {"keys": [{"name": "k", "pem": "PEM"}], "references": ["oci://r.io/*"]}})
>>> p.covers({}, "oci://r.io/models/bert:v1"), p.covers({}, "gs://b/m")
(True, False)
"""

from __future__ import annotations

import fnmatch
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Literal, Protocol

import msgspec

from modelhooks.core.errors import ConfigError

__all__ = ["MVO_LABEL", "Identity", "ModelVerifier", "Policy", "PolicySource", "Verdicts"]

# The pod label MVO (sigstore/model-validation-operator) selects Pods by: its value names the
# ModelValidation of the Pod's namespace that applies.
MVO_LABEL = "validation.ml.sigstore.dev/ml"


# frozen msgspec Structs, not dataclasses: making a Struct class costs ~2 % of a dataclass's
class Identity(msgspec.Struct, frozen=True):
    """A keyless signer: its OIDC issuer and certificate subject, each exact or an RE2-style
    regular expression (matched in full)."""

    issuer: str = ""
    subject: str = ""
    issuer_regexp: str = ""
    subject_regexp: str = ""

    def accepts(self, issuer: str, subject: str) -> bool:
        return _match(self.issuer, self.issuer_regexp, issuer) and _match(
            self.subject, self.subject_regexp, subject
        )

    def __str__(self) -> str:
        subject = self.subject or f"~{self.subject_regexp}"
        return f"{subject} ({self.issuer or '~' + self.issuer_regexp})"


def _match(exact: str, pattern: str, value: str) -> bool:
    if pattern:
        return re.fullmatch(pattern, value) is not None
    return exact == value


class Policy(msgspec.Struct, frozen=True):
    name: str
    namespace: str  # "" for a ClusterVerificationPolicy
    uid: str
    resource_version: str
    keys: tuple[tuple[str, str], ...] = ()  # (name, PEM)
    chains: tuple[tuple[str, str], ...] = ()  # (name, PEM)
    identities: tuple[Identity, ...] = ()
    selector: Mapping[str, Any] = msgspec.field(default_factory=dict)  # over the workload's labels
    references: tuple[str, ...] = ()  # globs over references; empty = every model
    mode: Literal["enforce", "warn"] = "enforce"
    failure_policy: Literal["Fail", "Ignore"] = "Fail"
    # where the model is verified: at admission (its signature and digests), or on the node
    # by an init container re-hashing the mounted image volume (modelhooks.core.node_verification)
    verify_on: Literal["admission", "node"] = "admission"
    trust_config: str = ""  # a sigstore ClientTrustConfig JSON (private instance), or ""
    kind: str = "VerificationPolicy"  # or ClusterVerificationPolicy, ModelValidation (MVO)
    refusal: str = ""  # why nothing it names can be trusted here (an MVO key file path)

    @classmethod
    def from_resource(cls, doc: Mapping[str, Any]) -> Policy:
        meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
        keys = tuple((k["name"], k.get("pem", "")) for k in spec.get("keys") or ())
        chains = tuple((c["name"], c.get("pem", "")) for c in spec.get("certificateChains") or ())
        identities = tuple(
            Identity(
                issuer=i.get("issuer", ""),
                subject=i.get("subject", ""),
                issuer_regexp=i.get("issuerRegExp", ""),
                subject_regexp=i.get("subjectRegExp", ""),
            )
            for i in spec.get("identities") or ()
        )
        policy = cls(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            keys=keys,
            chains=chains,
            identities=identities,
            selector=spec.get("workloadSelector") or {},
            references=tuple(spec.get("references") or ()),
            mode=spec.get("mode", "enforce"),
            failure_policy=spec.get("failurePolicy", "Fail"),
            verify_on=spec.get("verifyOn", "admission"),
            trust_config=spec.get("trustConfig", ""),
        )
        if not (keys or chains or identities):  # the CRD refuses it too; never "allow all"
            raise ConfigError(f"{policy.shown} trusts nothing (no keys, chains or identities)")
        if policy.verify_on not in ("admission", "node"):  # the CRD's enum too
            raise ConfigError(
                f"{policy.shown}: verifyOn {policy.verify_on!r} is not admission|node"
            )
        return policy

    @classmethod
    def from_model_validation(cls, doc: Mapping[str, Any]) -> Policy:
        """An MVO ModelValidation (ml.sigstore.dev/v1alpha1) as a policy for the Pods that
        carry its label (`validation.ml.sigstore.dev/ml: <its name>`, its namespace),
        verified as MVO does, on the node (`verifyOn: node`: an init container re-hashes the
        image volume, a directory signed with model.sig inside, as MVO's models are): its
        keyless identity maps; a key or CA given as a file path in MVO's validating
        container cannot be read here, and says so (at admission)."""
        meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
        config = spec.get("config") or {}
        sigstore = config.get("sigstoreConfig") or {}
        identities: tuple[Identity, ...] = ()
        if sigstore.get("certificateIdentity") and sigstore.get("certificateOidcIssuer"):
            identities = (
                Identity(
                    issuer=str(sigstore["certificateOidcIssuer"]),
                    subject=str(sigstore["certificateIdentity"]),
                ),
            )
        refusal = ""
        for method, field_ in (
            ("publicKeyConfig", "keyPath"),
            ("pkiConfig", "certificateAuthority"),
        ):
            if method in config:
                refusal = (
                    f"its {method}.{field_} ({(config[method] or {}).get(field_, '')}) is a file in "
                    "MVO's validating container, which admission cannot read: name the key or "
                    "CA in a VerificationPolicy (inline PEM) instead"
                )
        name = str(meta.get("name", ""))
        return cls(
            name=name,
            namespace=str(meta.get("namespace", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            identities=identities,
            selector={"matchLabels": {MVO_LABEL: name}},
            verify_on="node" if identities and not refusal else "admission",
            kind="ModelValidation",
            refusal=refusal or ("" if identities else "it names no verification method"),
        )

    @property
    def shown(self) -> str:
        if self.kind == "VerificationPolicy" and not self.namespace:
            return f"ClusterVerificationPolicy {self.name}"
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"

    @property
    def version(self) -> str:
        """What a cached verdict is bound to: a changed policy is another one."""
        return f"{self.uid}/{self.resource_version}"

    def covers(self, labels: Mapping[str, str], uri: str) -> bool:
        """Whether this policy applies to a workload with `labels` using model `uri`."""
        globs = self.references or ("*",)
        return selects(self.selector, labels) and any(fnmatch.fnmatchcase(uri, g) for g in globs)

    def trusts(self) -> str:
        """What it trusts, for messages."""
        if self.refusal and not (self.keys or self.chains or self.identities):
            return "nothing readable here"
        parts = [f"key {n}" for n, _ in self.keys] + [f"chain {n}" for n, _ in self.chains]
        return ", ".join(parts + [f"identity {i}" for i in self.identities])


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) over `labels`."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or ()
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


class PolicySource(Protocol):
    """The policies that apply in a namespace: its VerificationPolicies and every
    ClusterVerificationPolicy.

    >>> source.policies("team-a")  # doctest: +SKIP
    [Policy(name='signed-models', namespace='team-a', …)]
    """

    def policies(self, namespace: str, *, fresh: bool = False) -> list[Policy]:
        """The policies as last seen (a cache may serve them); `fresh`: as they are now."""
        ...


class ModelVerifier(Protocol):
    """Decides a model reference without re-hashing it.

    >>> digest = verifier.resolve("oci://r.io/models/bert:v1")  # doctest: +SKIP
    >>> verifier.verify("oci://r.io/models/bert:v1", digest, policy)  # doctest: +SKIP
    'key sha256:ab12…'
    """

    def resolve(self, uri: str) -> str:
        """The immutable digest `uri` names now (a tag's manifest digest); NotFound when
        there is nothing there, Transient when the store does not answer."""
        ...

    def verify(self, uri: str, digest: str, policy: Policy) -> str:
        """The signer, when a signature `policy` trusts covers exactly `digest`;
        VerificationFailed (with what failed) otherwise, Transient when it cannot tell."""
        ...


class Verdicts:
    """Successful verifications, by (digest, policy uid/resourceVersion): bounded in entries
    and bytes, each kept `ttl` seconds. Failures are never stored (a fixed signature counts
    at once), and a changed policy has another resourceVersion (it counts at once too)."""

    def __init__(self, size: int = 1000, max_bytes: int = 1 << 20, ttl: float = 600.0) -> None:
        self.size, self.max_bytes, self.ttl = size, max_bytes, ttl
        self._entries: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, digest: str, policy: Policy) -> str | None:
        key = (digest, policy.version)
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            if found[0] < time.monotonic():
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return found[1]

    def put(self, digest: str, policy: Policy, signer: str) -> None:
        key = (digest, policy.version)
        cost = _cost(key, signer)
        if self.size <= 0 or self.ttl <= 0 or cost > self.max_bytes:
            return
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = (time.monotonic() + self.ttl, signer)
            self._bytes += cost
            while len(self._entries) > self.size or self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, key: tuple[str, str]) -> None:
        _, signer = self._entries.pop(key)
        self._bytes -= _cost(key, signer)


def _cost(key: tuple[str, str], signer: str) -> int:
    return len(key[0]) + len(key[1]) + len(signer) + 64
