"""Deciding the model references of one AdmissionReview: each distinct reference resolved
to its immutable digest once, then checked against every policy covering it through the
ModelVerifier port, each policy once (its cached verdict first), all within the review's
deadline. The
`admission` handler (modelhooks.handlers.admission) turns the outcomes into its answer.

>>> checks = [Check("oci://r.io/m@sha256:…", covering=[policy])]  # doctest: +SKIP
>>> confine = confined(tenancy, "ns")  # tenancy.tenants: before anything is read  # doctest: +SKIP
>>> run_checks(checks, [policy], {}, deadline, verifier, verdicts, registry, confine)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import wait

import msgspec

from modelhooks.core.calls import CALLS, place
from modelhooks.core.errors import Forbidden, ModelhooksError, Transient, VerificationFailed
from modelhooks.core.logs import log
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.records import PUSHED_AT, ModelState
from modelhooks.core.tenancy import Tenancy
from modelhooks.core.verification import ModelVerifier, Policy, Verdicts

__all__ = ["Check", "Confine", "as_failure", "confined", "registered_target", "run_checks"]

_VERIFIABLE = ("oci://", "gs://", "s3://")

Confine = Callable[[str], None]  # Forbidden for a reference the namespace may not read


def confined(tenancy: Tenancy, namespace: str) -> Confine:
    """The tenancy check (`tenancy.tenants`, Tenancy.require: ingress's rule) of each
    reference admission would read for a workload of `namespace`: a bucket or repository of
    another tenant's is Forbidden before it is read with this process's credentials (its
    listing, its tags, whether it exists are not told)."""

    def confine(uri: str) -> None:
        if not uri.startswith(_VERIFIABLE):
            return  # nothing is read of it: it is refused as it cannot be verified
        try:
            tenancy.require(namespace, uri)
        except Forbidden as e:
            raise Forbidden(
                f"{e.message} (tenancy.tenants); nothing there was read", **e.details
            ) from None

    return confine


class Check(msgspec.Struct):  # a Struct: cheaper to make than a dataclass
    """One distinct reference: the policies covering it and how each one answered."""

    uri: str
    covering: list[Policy] = msgspec.field(default_factory=list)
    digest: str = ""
    target: str = ""  # what is verified: the reference, or a registered model's artifact
    error: ModelhooksError | None = None  # the reference itself could not be resolved
    accepted: list[tuple[Policy, str]] = msgspec.field(default_factory=list)  # (policy, signer)
    failed: list[tuple[Policy, ModelhooksError]] = msgspec.field(default_factory=list)
    late: bool = False  # not done within admission.timeout

    def outcome(self) -> tuple[list[Policy], list[tuple[Policy, ModelhooksError]], bool]:
        """(covering policies, those not satisfied and why, whether any verified it) as the
        answer reads them: EVERY covering policy must be satisfied, each by a verification of
        its own, never for want of a failure (a check that ended otherwise did not conclude,
        and says so)."""
        if self.late:
            timeout = Transient("verification did not complete within admission.timeout")
            covering = list(self.covering)
            return covering, [(p, timeout) for p in covering], False
        accepted = {id(p) for p, _ in self.accepted}
        failed = list(self.failed)
        unsure = VerificationFailed("its verification did not conclude; see admission's logs")
        done = accepted | {id(p) for p, _ in failed}
        failed += [(p, unsure) for p in self.covering if id(p) not in done]
        return self.covering, failed, bool(self.accepted)

    def answered_by(self, verdicts: Verdicts) -> bool:
        """A digest reference with a cached verdict for EVERY covering policy is answered
        here, with no thread and no call (the steady state once the mutating webhook has
        pinned tags); one policy without its verdict sends the check to `run`."""
        if not self.uri.startswith("oci://") or "@sha256:" not in self.uri:
            return False
        digest = self.uri.rpartition("@")[2]
        signers = [verdicts.get(digest, policy) for policy in self.covering]
        if not self.covering or any(signer is None for signer in signers):
            return False
        self.target, self.digest = self.uri, digest
        self.accepted = [(p, s) for p, s in zip(self.covering, signers, strict=True) if s]
        return True

    def run(
        self,
        found: list[Policy],
        labels: Mapping[str, str],
        verifier: ModelVerifier,
        verdicts: Verdicts,
        registry: ModelRegistry,
        confine: Confine,
    ) -> None:
        try:
            self.target, registered = registered_target(self.uri, registry)
            if self.target != self.uri:  # a registered model: policies of its artifact too
                more = [p for p in found if p not in self.covering]
                self.covering += [p for p in more if p.covers(labels, self.target)]
            if not self.covering:
                return
            if not self.target.startswith(_VERIFIABLE):
                raise VerificationFailed(
                    f"{self.target} cannot be verified at admission: only oci://, gs://, s3:// "
                    "and registered models (modelhooks.dev/model) can"
                )
            confine(self.target)  # a registered model's artifact too
            self.digest = verifier.resolve(self.target)
            if registered and registered != self.digest and self.target.startswith("oci://"):
                raise VerificationFailed(
                    f"it now names {self.digest}, not the registered {registered}"
                )
        except Exception as e:  # anything that is not a verification fails it
            self.error = as_failure(e, self.uri)
            self.failed = [(p, self.error) for p in self.covering]
            return
        for policy in self.covering:  # each one answers for itself: all must be satisfied
            cached = verdicts.get(self.digest, policy)
            if cached is not None:
                self.accepted.append((policy, cached))
                continue
            if policy.refusal:  # e.g. an MVO ModelValidation naming a key file path
                self.failed.append((policy, VerificationFailed(policy.refusal)))
                continue
            try:
                signer = verifier.verify(self.target, self.digest, policy)
            except Exception as e:  # anything that is not a verification fails it
                self.failed.append((policy, as_failure(e, self.target)))
                continue
            verdicts.put(self.digest, policy, signer)
            self.accepted.append((policy, signer))


def as_failure(error: BaseException, uri: str) -> ModelhooksError:
    """`error` as a check's failure: the port's own errors as they are; any other (a registry
    answering what its adapter cannot read: HTML, a JSON list, a layer without a digest) a
    failed verification, logged: it escaped the check, which then neither accepted nor
    failed, and the reference was admitted unverified."""
    if isinstance(error, ModelhooksError):
        return error
    log(logging.WARNING, "admission check failed", uri=uri, error=repr(error), exc_info=error)
    return VerificationFailed(
        f"its store's answer could not be read ({type(error).__name__}: {error})"[:500]
    )


def run_checks(
    checks: list[Check],
    found: list[Policy],
    labels: Mapping[str, str],
    deadline: float,
    verifier: ModelVerifier,
    verdicts: Verdicts,
    registry: ModelRegistry,
    confine: Confine,
) -> None:
    for check in checks:  # before anything is read, the verdict cache included
        if not check.covering:
            continue
        try:
            confine(check.uri)
        except ModelhooksError as e:
            check.error, check.failed = e, [(p, e) for p in check.covering]
    todo = [
        c
        for c in checks
        if c.error is None
        and (c.covering or c.uri.startswith("model:"))
        and not c.answered_by(verdicts)
    ]
    if not todo:
        return
    args = (found, labels, verifier, verdicts, registry, confine)
    futures = {CALLS.submit(place(c.uri), c.run, *args): c for c in todo}
    _, late = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
    for future, check in futures.items():
        if future in late:  # its thread may still write to it: the answer no longer reads it
            CALLS.abandon(place(check.uri), future)
            check.late = True
        elif (error := future.exception()) is not None:  # not made: its place is saturated
            check.error = as_failure(error, check.uri)
            check.failed = [(p, check.error) for p in check.covering]


def registered_target(uri: str, registry: ModelRegistry) -> tuple[str, str]:
    """(what to verify, the digest registered for it) for a reference; a registered model
    (`model:<name>[/<version>]`) is its version's artifact."""
    if not uri.startswith("model:"):
        return uri, ""
    name, _, wanted = uri.removeprefix("model:").partition("/")
    model = registry.get_model(name)
    if model is None:
        raise VerificationFailed(f"no registered model {name!r}: push and register it first")
    if wanted:
        version = registry.get_version(model.id, wanted)
    else:
        live = [v for v in registry.list_versions(model.id) if v.state == ModelState.LIVE]
        version = max(live, key=lambda v: v.custom_properties.get(PUSHED_AT, ""), default=None)
    if version is None or version.state != ModelState.LIVE:
        raise VerificationFailed(f"model {name!r} has no live version {wanted or ''}".rstrip())
    props = version.custom_properties
    if not props.get("uri"):
        raise VerificationFailed(f"model {name!r} version {version.name!r} records no artifact")
    return props["uri"], props.get("digest", "")
