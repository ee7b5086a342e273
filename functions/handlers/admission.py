"""`admission`: verify the models a workload uses when it is admitted, synchronously.

A webhook function: it answers AdmissionReviews (modelhooks.delivery.admission), not
events. Validating: each distinct model reference of the object (modelhooks.core.workloads)
is resolved to its immutable digest once, and checked against every policy covering it
(modelhooks.core.verification) by the `model_verifier` port, which decides from the
signature and the digests the store already has, never by re-hashing the model. A
reference is admitted when EVERY covering policy is satisfied (within one, any of its keys,
chains or identities may have signed), as Sigstore's policy-controller requires of its
ClusterImagePolicies: a workload's author chooses its labels and references, and could
otherwise label it into a loose policy beside a strict one. Each policy not satisfied is
named with why: an `enforce` one denies, a `warn` one adds a warning, and a check that could
not complete follows that policy's failurePolicy. No covering policy at all is a denial: the
namespace opted in, and a model nothing vouches for is not admitted. Successes are cached per
(digest, policy version); everything is answered within `review_timeout` seconds.
With `tenancy.tenants`, a reference to a bucket or repository the workload's namespace may
not act on (ingress's rule, Tenancy.require) is not read at all, nor answered from the cache:
denied saying so (a `warn` policy: a warning), neither pinned nor looked up for a Model.

Mutating: each OCI tag (image volume, `oci://` storageUri) is pinned to the digest it names
now, so what the validating webhook verifies is what runs.

`verifyOn: node` policies (modelhooks.core.node_verification): the mutating webhook adds an
init container re-hashing each image volume they cover on the node; the validating webhook
does not check those references' signatures, but denies a workload without that container.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import wait
from typing import Any

from modelhooks.core.admission import Decision, Review
from modelhooks.core.calls import CALLS, place
from modelhooks.core.errors import BadRequest, ModelhooksError, Transient
from modelhooks.core.function import Function
from modelhooks.core.node_verification import Root, inject, missing
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.reference_checks import Check, Confine, as_failure, confined, run_checks
from modelhooks.core.tenancy import Tenancy
from modelhooks.core.verification import ModelVerifier, Policy, PolicySource, Verdicts
from modelhooks.core.workloads import MODEL, POD_SPECS, Reference, in_scope, model_references

__all__ = ["FUNCTION", "handle"]


def handle(
    review: Review,
    *,
    policies: PolicySource,
    model_verifier: ModelVerifier,
    verdicts: Verdicts,
    registry: ModelRegistry,
    review_timeout: float,
    verifier_image: str,
    verifier_root: Root,
    tenancy: Tenancy,
) -> Decision:
    if review.operation not in ("CREATE", "UPDATE") or not in_scope(review.kind):
        return Decision.allow()
    try:
        refs = model_references(review.kind, review.object)
    except BadRequest as e:
        return Decision.deny(f"{review.kind} {review.name or '(new)'}: {e.message}", code=400)
    if not refs:
        return Decision.allow()
    deadline = time.monotonic() + review_timeout
    known = _known(review)
    confine = confined(tenancy, review.namespace)
    if review.kind == MODEL:
        added = [r for r in refs if r.uri not in known]
        if not added:
            return Decision.allow()
        if review.mutate:
            return _pin(added, model_verifier, deadline, confine)
        return _exists(review, added, model_verifier, deadline, confine)
    labels = _labels(review.kind, review.object)
    # a Pod's volumes and init containers cannot change once it exists: an update is
    # neither patched (the apiserver would refuse it) nor asked for an init container it
    # could not add; what it mounts was decided when it was created
    settled = review.kind == "Pod" and review.operation == "UPDATE"
    if review.mutate and settled:
        return Decision.allow()
    if review.mutate:
        node = (verifier_image, verifier_root)
        pinned = _pin([r for r in refs if r.uri not in known], model_verifier, deadline, confine)
        return _mutate(review, refs, labels, policies, pinned, node)
    seen: list[str] | None = None
    for fresh in (False, True):  # a denial is confirmed against the policies as they are now
        try:
            found = policies.policies(review.namespace, fresh=fresh)
        except Transient as e:
            return Decision.deny(f"verification policies could not be read: {e.message}", code=503)
        if [p.version for p in found] == seen:
            break  # the same policies: the same answer
        seen = [p.version for p in found]
        on_node, denials = missing(
            review.kind, review.object, found, labels, verifier_image, verifier_root
        )
        denials = [] if settled else denials
        uris = dict.fromkeys(r.uri for r in refs if r.uri not in known)
        checks = [Check(uri) for uri in uris]  # each one once
        for check in checks:  # a verifyOn: node policy verifies image volumes on the node
            check.covering = [
                p for p in found if p.covers(labels, check.uri) and p.verify_on != "node"
            ]
        run_checks(checks, found, labels, deadline, model_verifier, verdicts, registry, confine)
        decision = _decide(checks, review.namespace, on_node, denials)
        if decision.allowed:
            break
    return decision


def _decide(checks: list[Check], namespace: str, on_node: set[str], denials: list[str]) -> Decision:
    """The answer: `on_node` references are verified by their init containers (`denials`:
    those missing), the others by the policies covering them at admission."""
    denials = list(denials)
    warnings: list[str] = []
    for check in checks:
        covering, failed, accepted = check.outcome()
        if not covering and check.uri in on_node:
            continue
        if not covering and check.error is not None and not check.late:
            denials.append(f"model {check.uri}: {check.error.message}")
            continue
        if not covering:
            denials.append(
                f"model {check.uri}: no VerificationPolicy in namespace {namespace} nor "
                "ClusterVerificationPolicy covers it; create one that trusts its signer "
                "(infra/examples), or take the namespace out of admission"
            )
            continue
        denied = False
        for policy, error in failed:  # every covering policy must be satisfied
            line = _failure(check, policy, error)
            transient = isinstance(error, Transient)
            if policy.mode == "warn" or (transient and policy.failure_policy == "Ignore"):
                warnings.append(line)
            else:
                denials.append(line)
                denied = True
        if accepted and not denied and check.uri.startswith("oci://") and "@" not in check.uri:
            line = _unpinned(check)
            enforced = any(p.mode == "enforce" for p in covering)
            (denials if enforced else warnings).append(line)
    if denials:
        return Decision.deny("; ".join(denials), warnings=tuple(warnings))
    return Decision.allow(warnings=tuple(warnings))


def _unpinned(check: Check) -> str:
    """A verified tag: what runs is what it names when the node pulls it, later, not what
    was verified now (the registry may answer the node otherwise, the tag may move)."""
    raw = check.uri.removeprefix("oci://")
    head, _, last = raw.rpartition("/")
    pinned = f"{head}/{last.partition(':')[0]}@{check.digest}"
    return (
        f"model {check.uri}: verified as {check.digest}, but a tag is pulled later and may "
        "name another model by then; the mutating webhook pins it (it did not reach this "
        f"one or could not resolve it in time): name it by its digest, {pinned}"
    )


def _failure(check: Check, policy: Policy, error: ModelhooksError) -> str:
    at = f" ({check.digest})" if check.digest else ""
    via = f" = {check.target}" if check.target and check.target != check.uri else ""
    what = error.message
    if isinstance(error, Transient):
        what += f" [failurePolicy {policy.failure_policy}]"
    return f"model {check.uri}{via}{at}: {policy.shown} [{policy.mode}] trusts {policy.trusts()}: {what}"


def _known(review: Review) -> frozenset[str]:
    """The references an UPDATE keeps, not decided again (no registry round trip): a Pod's
    volumes cannot change and it runs already, and the Pods of a template are decided when
    they are created; so a label, a replica count or a controller removing its finalizer is
    never refused because a registry is down or a signature was removed since. A reference
    the UPDATE adds is decided. An InferenceService's are always decided: KServe fetches
    its models again for the Pods an update rolls out, and admission sees none of them."""
    if review.operation != "UPDATE" or review.kind not in (*POD_SPECS, MODEL):
        return frozenset()
    try:
        return frozenset(r.uri for r in model_references(review.kind, review.old_object))
    except BadRequest:  # what it replaces did not parse: decide every reference
        return frozenset()


def _mutate(
    review: Review,
    refs: list[Reference],
    labels: dict[str, str],
    policies: PolicySource,
    pinned: Decision,
    node: tuple[str, Root],
) -> Decision:
    """Tags `pinned`, and the init containers of `verifyOn: node` policies added (the policies
    as last seen: a mutating answer denies nothing, the validating webhook reads them fresh)."""
    if not any(r.source == "image-volume" for r in refs):
        return pinned
    try:
        found = policies.policies(review.namespace)
    except Transient as e:
        warning = f"verification policies could not be read, no init container added: {e.message}"
        return Decision.allow(warnings=(*pinned.warnings, warning), patch=pinned.patch)
    added = inject(review.kind, review.object, found, labels, *node)
    return Decision.allow(warnings=pinned.warnings, patch=(*pinned.patch, *added))


def _pin(
    refs: list[Reference], verifier: ModelVerifier, deadline: float, confine: Confine
) -> Decision:
    """Mutating: each OCI tag replaced by its digest (a JSONPatch); a tag that cannot be
    resolved stays (with a warning): the validating webhook then decides. Each distinct tag
    is resolved once, however many volumes name it (thousands would each be a registry
    round trip, most past the deadline); one in a repository the namespace may not use
    (`confine`) is not resolved at all."""
    tags = [r for r in refs if r.uri.startswith("oci://") and "@" not in r.uri]
    if not tags:
        return Decision.allow()
    warnings: list[str] = []
    uris = list(dict.fromkeys(r.uri for r in tags))
    for uri in list(uris):
        try:
            confine(uri)
        except ModelhooksError as e:
            uris.remove(uri)
            warnings.append(f"{uri}: not pinned: {e.message}")
    tags = [r for r in tags if r.uri in uris]
    resolving = {uri: CALLS.submit(place(uri), verifier.resolve, uri) for uri in uris}
    wait(resolving.values(), timeout=max(0.0, deadline - time.monotonic()))
    for uri, future in resolving.items():
        CALLS.abandon(place(uri), future)  # one done: nothing; one not started: never will be
    patch: list[Mapping[str, Any]] = []
    for ref in tags:
        future = resolving[ref.uri]
        if future.cancelled() or not future.done():
            warnings.append(f"{ref.raw}: not pinned, the registry did not answer in time")
            continue
        error = future.exception()
        if error is not None:
            reason = error.message if isinstance(error, ModelhooksError) else type(error).__name__
            warnings.append(f"{ref.raw}: not pinned: {reason}")
            continue
        patch.append({"op": "replace", "path": ref.pointer, "value": _pinned(ref, future.result())})
    return Decision.allow(warnings=tuple(dict.fromkeys(warnings)), patch=tuple(patch))


def _exists(
    review: Review,
    refs: list[Reference],
    verifier: ModelVerifier,
    deadline: float,
    confine: Confine,
) -> Decision:
    """A Model naming an artifact that does not exist is refused (check-if-exists): it
    would never register, and a typo is cheaper to fix now. Not verified: it is signed
    after it is pushed. One naming a bucket or repository its namespace may not use is
    refused before anything there is read (whether it exists is not told)."""
    for ref in refs:
        try:
            confine(ref.uri)
        except ModelhooksError as e:
            what = f"Model {review.namespace}/{review.name or '(new)'}: {ref.uri}"
            return Decision.deny(f"{what}: {e.message}", code=403)
    futures = {r: CALLS.submit(place(r.uri), verifier.resolve, r.uri) for r in refs}
    wait(futures.values(), timeout=max(0.0, deadline - time.monotonic()))
    for ref, future in futures.items():
        CALLS.abandon(place(ref.uri), future)  # one done: nothing; one not started: never will be
    for ref, future in futures.items():
        what = f"Model {review.namespace}/{review.name or '(new)'}: {ref.uri}"
        if future.cancelled() or not future.done():
            return Decision.deny(f"{what}: its store did not answer in time; retry", code=503)
        error = future.exception()
        if error is not None and not isinstance(error, ModelhooksError):
            error = as_failure(error, ref.uri)  # a store answering what cannot be read
        if isinstance(error, Transient):
            return Decision.deny(f"{what}: {error.message}; retry", code=503)
        if isinstance(error, ModelhooksError):
            return Decision.deny(f"{what}: {error.message}", code=403)
    return Decision.allow()


def _pinned(ref: Reference, digest: str) -> str:
    """`ref` as written, its tag replaced by `digest` (`r.io/m:v1` → `r.io/m@sha256:…`)."""
    raw = ref.raw
    head, _, last = raw.rpartition("/")
    if ":" in last:
        last = last.rpartition(":")[0]
    return f"{head}/{last}@{digest}" if head else f"{last}@{digest}"


def _labels(kind: str, obj: Mapping[str, Any]) -> dict[str, str]:
    """The workload's labels, and its pod template's (a selector may name either)."""
    labels: dict[str, str] = {}
    nodes: list[Any] = [obj]
    path = POD_SPECS.get(kind, ())
    if len(path) > 2:
        node: Any = obj
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, Mapping) else None
        nodes.append(node)
    for node in nodes:
        meta = node.get("metadata") if isinstance(node, Mapping) else None
        found = meta.get("labels") if isinstance(meta, Mapping) else None
        if isinstance(found, Mapping):
            labels.update({str(k): str(v) for k, v in found.items()})
    return labels


FUNCTION = Function(
    name="admission",
    accepts=frozenset(),
    handle=handle,
    extras=("signing", "k8s"),
    kind="admission",
)
