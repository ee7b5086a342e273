"""The admission handler over fakes: which references each workload kind names, which policy
decides, warn mode, failurePolicy, the cache, pinning and the deadline."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from modelhooks.core.admission import Review
from modelhooks.core.errors import BadRequest, Unavailable, VerificationFailed
from modelhooks.core.tenancy import Tenancy
from modelhooks.core.verification import Policy, Verdicts
from modelhooks.core.workloads import model_references
from modelhooks.handlers.admission import handle
from tests.fakes.memory_registry import InMemoryModelRegistry

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def policy(name: str = "p", *, version: str = "1", **spec: Any) -> Policy:
    spec.setdefault("keys", [{"name": "team", "pem": "PEM"}])
    return Policy.from_resource(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "resourceVersion": version,
            },
            "spec": spec,
        }
    )


class Policies:
    """`cached`: what a watch has seen so far (default: the same as now)."""

    def __init__(self, *found: Policy, cached: list[Policy] | None = None) -> None:
        self.found = list(found)
        self.cached = cached
        self.fresh_reads = 0

    def policies(self, namespace: str, *, fresh: bool = False) -> list[Policy]:
        self.fresh_reads += fresh
        return self.found if fresh or self.cached is None else self.cached


class Verifier:
    """Tags → digests; digests → the policies whose trust signed them."""

    def __init__(self, tags: dict[str, str], signed: dict[str, set[str]]) -> None:
        self.tags, self.signed = tags, signed
        self.resolved: list[str] = []
        self.verified: list[tuple[str, str]] = []
        self.hang = threading.Event()
        self.hanging = False
        self.down = False

    def resolve(self, uri: str) -> str:
        self.resolved.append(uri)
        if self.hanging:
            self.hang.wait(5)
        if self.down:
            raise Unavailable("registry r.io did not answer")
        if "@" in uri:
            return uri.rpartition("@")[2]
        if uri not in self.tags:
            raise VerificationFailed(f"{uri}: no such tag")
        return self.tags[uri]

    def verify(self, uri: str, digest: str, policy: Policy) -> str:
        self.verified.append((digest, policy.name))
        if policy.name in self.signed.get(digest, set()):
            return f"key of {policy.name}"
        raise VerificationFailed(f"no signature refers to {digest}: sign it (modelhooks sign …)")


def pod(*images: str, labels: dict[str, str] | None = None, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "labels": labels or {}, "annotations": annotations},
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [{"name": f"m{i}", "image": {"reference": r}} for i, r in enumerate(images)],
        },
    }


def review(
    obj: dict[str, Any],
    kind: str = "Pod",
    *,
    mutate: bool = False,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> Review:
    return Review("uid-1", kind, operation, "ns", "p", obj, mutate, old or {})


def run(rv: Review, policies: Policies, verifier: Verifier, **kw: Any) -> Any:
    kw.setdefault("verdicts", Verdicts())
    kw.setdefault("registry", InMemoryModelRegistry())
    kw.setdefault("review_timeout", 2.0)
    kw.setdefault("verifier_image", "r.io/modelhooks:1")
    kw.setdefault("verifier_root", lambda: "")  # the public-good Sigstore: nothing to pass
    kw.setdefault("tenancy", Tenancy())  # off: every namespace may act anywhere
    return handle(rv, policies=policies, model_verifier=verifier, **kw)


TAGS = {"oci://r.io/models/bert:v1": D1, "oci://r.io/models/gpt:v1": D2}
BERT = f"r.io/models/bert@{D1}"  # bert:v1 pinned, as the mutating webhook does


def test_a_signed_model_is_admitted_and_an_unsigned_one_denied_saying_what_to_do() -> None:
    verifier = Verifier(TAGS, {D1: {"p"}})
    assert run(review(pod(BERT)), Policies(policy()), verifier).allowed
    denied = run(review(pod("r.io/models/gpt:v1")), Policies(policy()), verifier)
    assert not denied.allowed and denied.code == 403
    for part in (
        "oci://r.io/models/gpt:v1",
        D2,
        "VerificationPolicy ns/p",
        "key team",
        "modelhooks sign",
    ):
        assert part in denied.message


def test_each_distinct_reference_is_verified_once_per_request() -> None:
    verifier = Verifier(TAGS, {D1: {"p"}})
    obj = pod(BERT, BERT, BERT)
    assert run(review(obj), Policies(policy()), verifier).allowed
    assert verifier.resolved == [f"oci://{BERT}"]
    assert verifier.verified == [(D1, "p")]


def test_a_verified_tag_is_denied_saying_to_pin_it() -> None:
    """What runs is what a tag names when the node pulls it, later: a registry answering the
    node otherwise (or a tag moved meanwhile) ran a model other than the one verified. The
    mutating webhook pins tags, but it is failurePolicy Ignore: a registry that stalls it
    (or a webhook it did not reach) let the validating webhook verify the tag and admit it."""
    verifier = Verifier(TAGS, {D1: {"p", "w"}})
    denied = run(review(pod("r.io/models/bert:v1")), Policies(policy()), verifier)
    assert not denied.allowed and denied.code == 403
    assert (
        f"model oci://r.io/models/bert:v1: verified as {D1}, but a tag is pulled later"
        in (denied.message)
        and f"name it by its digest, r.io/models/bert@{D1}" in denied.message
    )
    warned = run(review(pod("r.io/models/bert:v1")), Policies(policy("w", mode="warn")), verifier)
    assert warned.allowed and "a tag is pulled later" in warned.warnings[0]
    isvc = {"spec": {"predictor": {"model": {"storageUri": "oci://r.io/models/bert:v1"}}}}
    assert not run(review(isvc, "InferenceService"), Policies(policy()), verifier).allowed
    pinned = run(review(pod(BERT)), Policies(policy()), verifier)
    assert pinned.allowed and not pinned.warnings


def test_successes_are_cached_by_digest_and_policy_version_failures_never() -> None:
    verifier, verdicts = Verifier(TAGS, {D1: {"p"}}), Verdicts()
    for _ in range(3):
        run(review(pod("r.io/models/bert:v1")), Policies(policy()), verifier, verdicts=verdicts)
        run(review(pod("r.io/models/gpt:v1")), Policies(policy()), verifier, verdicts=verdicts)
    assert verifier.verified.count((D1, "p")) == 1
    assert verifier.verified.count((D2, "p")) == 3
    changed = policy(version="2")  # a policy change counts at once
    run(review(pod("r.io/models/bert:v1")), Policies(changed), verifier, verdicts=verdicts)
    assert verifier.verified.count((D1, "p")) == 2


def test_the_cache_is_bounded_in_entries_and_bytes_and_expires() -> None:
    verdicts = Verdicts(size=2, max_bytes=10_000, ttl=0.05)
    p = policy()
    for digest in ("a", "b", "c"):
        verdicts.put(digest, p, "signer")
    assert len(verdicts) == 2 and verdicts.get("a", p) is None and verdicts.get("c", p)
    time.sleep(0.06)
    assert verdicts.get("c", p) is None
    small = Verdicts(size=100, max_bytes=300)
    for digest in "abcdefgh":
        small.put(digest, p, "signer")
    assert 0 < len(small) < 8


def test_every_covering_policy_must_be_satisfied_warn_mode_only_warns() -> None:
    """A workload's author chooses its labels and references: labelled into a loose policy
    beside a strict one, it was admitted by the loose one's key alone (ANY policy sufficed)."""
    verifier = Verifier(TAGS, {D1: {"loose"}, D2: {"strict", "loose"}})
    both = Policies(policy("strict"), policy("loose"))
    denied = run(review(pod(BERT)), both, verifier)
    assert not denied.allowed and denied.code == 403
    assert "VerificationPolicy ns/strict [enforce] trusts key team" in denied.message
    assert "no signature refers to" in denied.message and "ns/loose" not in denied.message
    assert run(review(pod(f"r.io/models/gpt@{D2}")), both, verifier).allowed
    assert sorted(verifier.verified) == [
        (D1, "loose"),
        (D1, "strict"),
        (D2, "loose"),
        (D2, "strict"),
    ]
    warn = Policies(policy("w", mode="warn"))
    decision = run(review(pod("r.io/models/gpt:v1")), warn, verifier)
    assert decision.allowed and "VerificationPolicy ns/w [warn]" in decision.warnings[0]
    beside = Policies(policy("loose"), policy("w", mode="warn"))  # enforce met, warn not
    warned = run(review(pod(BERT)), beside, verifier)
    assert warned.allowed and len(warned.warnings) == 1
    assert "VerificationPolicy ns/w [warn]" in warned.warnings[0]


def test_each_covering_policy_follows_its_own_failure_policy() -> None:
    verifier = Verifier(TAGS, {D1: {"loose"}})

    class Down(Verifier):  # the strict policy's signer cannot be reached
        def verify(self, uri: str, digest: str, policy: Policy) -> str:
            if policy.name == "strict":
                raise Unavailable("its transparency log did not answer")
            return super().verify(uri, digest, policy)

    down = Down(TAGS, {D1: {"loose"}})
    ignore = Policies(policy("strict", failurePolicy="Ignore"), policy("loose"))
    opened = run(review(pod(BERT)), ignore, down)
    assert opened.allowed and "ns/strict" in opened.warnings[0]
    assert "failurePolicy Ignore" in opened.warnings[0]
    closed = run(review(pod(BERT)), Policies(policy("strict"), policy("loose")), down)
    assert not closed.allowed and "failurePolicy Fail" in closed.message
    assert "ns/strict" in closed.message and "ns/loose" not in closed.message
    assert run(review(pod(BERT)), Policies(policy("loose")), verifier).allowed


def test_a_cached_verdict_answers_for_its_own_policy_alone() -> None:
    """The cache answered a reference from the first covering policy it held a success of:
    a loose policy's cached verdict admitted it past a strict one never checked."""
    verifier, verdicts = Verifier(TAGS, {D1: {"loose"}}), Verdicts()
    assert run(review(pod(BERT)), Policies(policy("loose")), verifier, verdicts=verdicts).allowed
    both = Policies(policy("loose"), policy("strict"))
    denied = run(review(pod(BERT)), both, verifier, verdicts=verdicts)
    assert not denied.allowed and "ns/strict" in denied.message
    assert verifier.verified == [(D1, "loose"), (D1, "strict")]  # loose's answered from cache
    verifier.signed[D1].add("strict")
    assert run(review(pod(BERT)), both, verifier, verdicts=verdicts).allowed
    assert run(review(pod(BERT)), both, verifier, verdicts=verdicts).allowed
    assert verifier.verified == [(D1, "loose"), (D1, "strict"), (D1, "strict")]


def test_a_node_policy_and_an_admission_policy_covering_one_volume_are_both_required() -> None:
    node = policy("n", verifyOn="node")
    verifier = Verifier(TAGS, {D1: {"a"}})
    both = Policies(node, policy("a"))
    mutated = run(review(pod(BERT), mutate=True), both, verifier)
    (added,) = [op for op in mutated.patch if op["path"] == "/spec/initContainers"]
    with_init = pod(BERT)
    with_init["spec"]["initContainers"] = added["value"]
    assert run(review(with_init), both, verifier).allowed
    without = run(review(pod(BERT)), both, verifier)
    assert not without.allowed and "no init container" in without.message
    unsigned = run(review(with_init), Policies(node, policy("b")), verifier)
    assert not unsigned.allowed and "VerificationPolicy ns/b" in unsigned.message
    assert verifier.verified.count((D1, "n")) == 0  # the node verifies it, not admission


def test_no_covering_policy_is_a_denial_and_globs_and_selectors_choose() -> None:
    verifier = Verifier(TAGS, {D1: {"p"}, D2: {"p"}})
    other = Policies(policy(references=["oci://elsewhere.io/*"]))
    decision = run(review(pod("r.io/models/bert:v1")), other, verifier)
    assert not decision.allowed and "no VerificationPolicy" in decision.message
    selected = Policies(policy(workloadSelector={"matchLabels": {"team": "a"}}))
    assert not run(review(pod("r.io/models/bert:v1")), selected, verifier).allowed
    assert run(review(pod(BERT, labels={"team": "a"})), selected, verifier).allowed


def test_failure_policy_decides_when_the_registry_does_not_answer() -> None:
    verifier = Verifier(TAGS, {D1: {"p"}})
    verifier.down = True
    closed = run(review(pod("r.io/models/bert:v1")), Policies(policy()), verifier)
    assert (
        not closed.allowed
        and "did not answer" in closed.message
        and "failurePolicy Fail" in closed.message
    )
    opened = run(
        review(pod("r.io/models/bert:v1")), Policies(policy(failurePolicy="Ignore")), verifier
    )
    assert opened.allowed and "failurePolicy Ignore" in opened.warnings[0]


def test_a_hanging_registry_is_answered_by_the_deadline() -> None:
    verifier = Verifier(TAGS, {D1: {"p"}})
    verifier.hanging = True
    started = time.monotonic()
    decision = run(
        review(pod("r.io/models/bert:v1")), Policies(policy()), verifier, review_timeout=0.3
    )
    verifier.hang.set()
    assert time.monotonic() - started < 1.0
    assert not decision.allowed and "did not complete within admission.timeout" in decision.message


def test_mutating_pins_tags_to_digests_in_place() -> None:
    verifier = Verifier(TAGS, {})
    obj = pod("r.io/models/bert:v1", f"r.io/models/gpt@{D2}")
    decision = run(review(obj, mutate=True), Policies(), verifier)
    assert decision.allowed
    assert list(decision.patch) == [
        {
            "op": "replace",
            "path": "/spec/volumes/0/image/reference",
            "value": f"r.io/models/bert@{D1}",
        }
    ]
    verifier.down = True
    unpinned = run(review(obj, mutate=True), Policies(), verifier)
    assert unpinned.allowed and not unpinned.patch and "not pinned" in unpinned.warnings[0]


def test_mutating_resolves_each_distinct_tag_once_however_many_volumes_name_it() -> None:
    verifier = Verifier(TAGS, {})
    obj = pod(*["r.io/models/bert:v1", "r.io/models/gpt:v1"] * 128)
    decision = run(review(obj, mutate=True), Policies(), verifier)
    assert sorted(verifier.resolved) == ["oci://r.io/models/bert:v1", "oci://r.io/models/gpt:v1"]
    assert len(decision.patch) == 256
    assert decision.patch[255] == {
        "op": "replace",
        "path": "/spec/volumes/255/image/reference",
        "value": f"r.io/models/gpt@{D2}",
    }
    verifier.down = True
    unpinned = run(review(obj, mutate=True), Policies(), verifier)
    assert len(unpinned.warnings) == 2 and not unpinned.patch  # one a tag, not one a volume


def test_out_of_scope_kinds_and_operations_are_allowed_untouched() -> None:
    verifier = Verifier(TAGS, {})
    assert run(review({"data": {}}, "ConfigMap"), Policies(), verifier).allowed
    assert run(review(pod("r.io/models/gpt:v1"), operation="DELETE"), Policies(), verifier).allowed
    assert run(review(pod()), Policies(), verifier).allowed  # no model
    assert verifier.resolved == []


def test_an_update_keeping_its_models_is_not_decided_again() -> None:
    """A label, a replica count, a controller removing its finalizer (the Job controller's
    on each of its Pods): no registry round trip, so neither a registry down nor a
    signature removed since refuses it. What an update adds is decided."""
    verifier = Verifier(TAGS, {D1: {"p"}})
    verifier.down = True
    running = pod(f"r.io/models/bert@{D1}")
    unlabelled = pod(f"r.io/models/bert@{D1}", labels={"x": "y"})
    for mutate in (False, True):
        decision = run(
            review(running, mutate=mutate, operation="UPDATE", old=unlabelled),
            Policies(policy()),
            verifier,
        )
        assert decision.allowed and not decision.patch, decision.message
    template = pod("r.io/models/bert:v1")
    deployment = {"metadata": {"name": "d"}, "spec": {"replicas": 1, "template": template}}
    scaled = {"metadata": {"name": "d"}, "spec": {"replicas": 3, "template": template}}
    for mutate in (False, True):
        kept = review(scaled, "Deployment", mutate=mutate, operation="UPDATE", old=deployment)
        decision = run(kept, Policies(policy()), verifier)
        assert decision.allowed and not decision.patch and not decision.warnings
    model = {"spec": {"source": {"oci": {"reference": "r.io/models/bert:v1"}}}}
    assert run(review(model, "Model", operation="UPDATE", old=model), Policies(), verifier).allowed
    assert verifier.resolved == []
    verifier.down = False
    more = pod(f"r.io/models/bert@{D1}", "r.io/models/gpt:v1")
    added = run(review(more, operation="UPDATE", old=running), Policies(policy()), verifier)
    assert not added.allowed and "gpt" in added.message and "bert" not in added.message
    assert verifier.resolved == ["oci://r.io/models/gpt:v1"]
    isvc = {"spec": {"predictor": {"model": {"storageUri": "oci://r.io/models/gpt:v1"}}}}
    kept = review(isvc, "InferenceService", operation="UPDATE", old=isvc)
    assert not run(kept, Policies(policy()), verifier).allowed  # KServe fetches it again


@pytest.mark.parametrize("fails", ["resolve", "verify"])
def test_a_verifier_failing_otherwise_than_by_its_errors_denies(fails: str) -> None:
    """An adapter raising what is not a ModelhooksError (a registry's answer it could not
    read) fails the check: the check neither accepted nor failed, and the model was admitted."""
    verifier = Verifier(TAGS, {})

    def broken(*args: Any) -> str:
        raise KeyError("digest")

    setattr(verifier, fails, broken)
    for mode in ("enforce", "warn"):
        decision = run(review(pod("r.io/models/bert:v1")), Policies(policy(mode=mode)), verifier)
        said = decision.message if mode == "enforce" else " ".join(decision.warnings)
        assert decision.allowed is (mode == "warn")
        assert "its store's answer could not be read (KeyError: 'digest')" in said


def test_a_model_whose_store_answers_what_cannot_be_read_is_refused_saying_so() -> None:
    """Check-if-exists re-raised such an error: the review was denied as admission failing
    (status code 500, 'see its logs'), not as the Model's store answering garbage."""
    verifier = Verifier(TAGS, {})

    def garbage(uri: str) -> str:
        raise ValueError("Expecting value: line 1 column 1 (char 0)")

    verifier.resolve = garbage  # type: ignore[method-assign]
    model = {"spec": {"source": {"oci": {"reference": "r.io/models/bert:v1"}}}}
    decision = run(review(model, "Model"), Policies(), verifier)
    assert not decision.allowed and decision.code == 403
    assert "its store's answer could not be read (ValueError: Expecting value" in decision.message


def test_a_registered_model_named_by_annotation_is_its_artifact() -> None:
    registry = InMemoryModelRegistry()
    model = registry.create_model("bert", properties={})
    registry.create_version(
        model.id, "1", properties={"uri": "oci://r.io/models/bert:v1", "digest": D1}
    )
    verifier = Verifier(TAGS, {D1: {"p"}})
    obj = pod(**{"modelhooks.dev/model": "bert/1"})
    assert run(review(obj), Policies(policy()), verifier, registry=registry).allowed
    missing = run(
        review(pod(**{"modelhooks.dev/model": "gpt"})),
        Policies(policy()),
        verifier,
        registry=registry,
    )
    assert not missing.allowed and "no registered model 'gpt'" in missing.message
    moved = Verifier({"oci://r.io/models/bert:v1": D2}, {D2: {"p"}})
    refused = run(review(obj), Policies(policy()), moved, registry=registry)
    assert not refused.allowed and "not the registered" in refused.message


@pytest.mark.parametrize(
    ("kind", "obj", "pointer"),
    [
        (
            "Deployment",
            {
                "spec": {
                    "template": {
                        "spec": {"volumes": [{"name": "m", "image": {"reference": "r.io/m:v1"}}]}
                    }
                }
            },
            "/spec/template/spec/volumes/0/image/reference",
        ),
        (
            "StatefulSet",
            {
                "spec": {
                    "template": {
                        "spec": {"volumes": [{"name": "m", "image": {"reference": "r.io/m:v1"}}]}
                    }
                }
            },
            "/spec/template/spec/volumes/0/image/reference",
        ),
        (
            "DaemonSet",
            {
                "spec": {
                    "template": {
                        "spec": {"volumes": [{"name": "m", "image": {"reference": "r.io/m:v1"}}]}
                    }
                }
            },
            "/spec/template/spec/volumes/0/image/reference",
        ),
        (
            "Job",
            {
                "spec": {
                    "template": {
                        "spec": {"volumes": [{"name": "m", "image": {"reference": "r.io/m:v1"}}]}
                    }
                }
            },
            "/spec/template/spec/volumes/0/image/reference",
        ),
        (
            "CronJob",
            {
                "spec": {
                    "jobTemplate": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "volumes": [{"name": "m", "image": {"reference": "r.io/m:v1"}}]
                                }
                            }
                        }
                    }
                }
            },
            "/spec/jobTemplate/spec/template/spec/volumes/0/image/reference",
        ),
        (
            "InferenceService",
            {"spec": {"predictor": {"model": {"storageUri": "oci://r.io/m:v1"}}}},
            "/spec/predictor/model/storageUri",
        ),
    ],
)
def test_every_workload_kind_names_its_models(kind: str, obj: dict[str, Any], pointer: str) -> None:
    (ref,) = model_references(kind, obj)
    assert ref.uri == "oci://r.io/m:v1" and ref.pointer == pointer


def test_inference_service_storage_uris_and_template_annotations() -> None:
    isvc = {
        "spec": {
            "predictor": {
                "model": {"storageUris": [{"uri": "gs://b/m", "mountPath": "/a"}, "s3://b/n"]}
            }
        }
    }
    assert [r.uri for r in model_references("InferenceService", isvc)] == ["gs://b/m", "s3://b/n"]
    deploy = {"spec": {"template": {"metadata": {"annotations": {"modelhooks.dev/model": "bert"}}}}}
    assert [r.uri for r in model_references("Deployment", deploy)] == ["model:bert"]
    assert (
        model_references(
            "Pod", {"spec": {"volumes": [{"name": "x", "image": {"reference": "bert"}}]}}
        )[0].uri
        == "oci://docker.io/library/bert"
    )


def test_a_trained_model_names_its_model() -> None:
    trained = {
        "spec": {"inferenceService": "s", "model": {"storageUri": "oci://r.io/models/gpt:v1"}}
    }
    (ref,) = model_references("TrainedModel", trained)
    assert (ref.uri, ref.pointer) == ("oci://r.io/models/gpt:v1", "/spec/model/storageUri")
    denied = run(review(trained, "TrainedModel"), Policies(policy()), Verifier(TAGS, {}))
    assert not denied.allowed and "no signature refers" in denied.message


def test_an_inference_service_naming_its_model_by_kserves_storage_spec_is_not_admitted() -> None:
    """`storage: {key, path}` (KServe's StorageSpec, ModelMesh's way: a path in a store the
    storage-config secret names): no reference was found, so it was admitted unverified."""
    isvc = {"spec": {"predictor": {"model": {"storage": {"key": "minio", "path": "m/bert"}}}}}
    (ref,) = model_references("InferenceService", isvc)
    assert (ref.uri, ref.pointer) == (
        "kserve-storage:minio/m/bert",
        "/spec/predictor/model/storage",
    )
    denied = run(review(isvc, "InferenceService"), Policies(policy()), Verifier(TAGS, {}))
    assert not denied.allowed
    assert "kserve-storage:minio/m/bert cannot be verified at admission" in denied.message
    warned = run(
        review(isvc, "InferenceService"), Policies(policy(mode="warn")), Verifier(TAGS, {})
    )
    assert warned.allowed and "cannot be verified" in warned.warnings[0]
    sized = {"spec": {"predictor": {"resources": {"requests": {"storage": "1Gi"}}}}}
    assert model_references("InferenceService", sized) == []


@pytest.mark.parametrize(
    ("kind", "obj"),
    [
        ("Pod", {"spec": {"volumes": "nope"}}),
        ("Pod", {"spec": {"volumes": [{"image": {"reference": 3}}]}}),
        ("Pod", {"metadata": {"annotations": {"modelhooks.dev/model": "a/b/c"}}}),
        ("Deployment", {"spec": {"template": []}}),
        ("InferenceService", {"spec": {"predictor": {"storageUri": "no-scheme"}}}),
    ],
)
def test_malformed_objects_are_bad_requests_naming_the_field(
    kind: str, obj: dict[str, Any]
) -> None:
    with pytest.raises(BadRequest):
        model_references(kind, obj)
    decision = run(review(obj, kind), Policies(policy()), Verifier({}, {}))
    assert not decision.allowed and decision.code == 400


def test_a_policy_that_trusts_nothing_is_refused() -> None:
    from modelhooks.core.errors import ConfigError

    with pytest.raises(ConfigError, match="trusts nothing"):
        Policy.from_resource({"metadata": {"name": "empty"}, "spec": {"references": ["*"]}})


def test_identities_match_exactly_or_by_regular_expression() -> None:
    from modelhooks.core.verification import Identity

    exact = Identity(issuer="https://i", subject="me@x")
    assert exact.accepts("https://i", "me@x") and not exact.accepts("https://i", "you@x")
    pattern = Identity(issuer="https://i", subject_regexp=r".*@x\.org")
    assert pattern.accepts("https://i", "a@x.org") and not pattern.accepts(
        "https://i", "a@x.org.evil"
    )


def model(source: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "bert"}, "spec": {"version": "1", "source": source}}


def test_a_model_naming_an_artifact_that_does_not_exist_is_refused() -> None:
    verifier = Verifier(TAGS, {})
    ok = run(
        review(model({"oci": {"reference": "r.io/models/bert:v1"}}), "Model"), Policies(), verifier
    )
    assert ok.allowed and verifier.verified == []  # checked to exist, not verified
    missing = run(
        review(model({"oci": {"reference": "r.io/models/nope:v1"}}), "Model"), Policies(), verifier
    )
    assert not missing.allowed and "Model ns/p: oci://r.io/models/nope:v1" in missing.message
    verifier.down = True
    down = run(review(model({"gcs": {"uri": "gs://b/m/1/"}}), "Model"), Policies(), verifier)
    assert not down.allowed and down.code == 503 and "retry" in down.message


TENANTS = Tenancy.parse("ns=oci://r.io/models/bert,gs://ours;other=oci://r.io/*,gs://theirs")


@pytest.mark.parametrize("mode", ["enforce", "warn"])
def test_a_reference_its_namespace_may_not_use_is_refused_before_anything_is_read(
    mode: str,
) -> None:
    """With tenancy.tenants, a workload of namespace ns naming another tenant's repository or
    bucket was read with the process's credentials (resolved, listed, its signature fetched)
    and the answer told what is there; a verdict cached for another namespace admitted it."""
    p = policy(mode=mode)
    verifier, verdicts = Verifier(TAGS, {D1: {"p"}, D2: {"p"}}), Verdicts()
    verdicts.put(D2, p, "key of p")  # namespace other's workload was admitted with it
    isvc = {"spec": {"predictor": {"model": {"storageUri": "gs://theirs/m/1/"}}}}
    for rv, location in (
        (review(pod(f"r.io/models/gpt@{D2}")), "oci://r.io/models/gpt"),
        (review(pod("r.io/models/gpt:v1")), "oci://r.io/models/gpt"),
        (review(isvc, "InferenceService"), "gs://theirs"),
    ):
        decision = run(rv, Policies(p), verifier, verdicts=verdicts, tenancy=TENANTS)
        said = f"namespace 'ns' may not act on {location} (tenancy.tenants)"
        if mode == "enforce":
            assert not decision.allowed and decision.code == 403 and said in decision.message
            assert "VerificationPolicy ns/p [enforce]" in decision.message
        else:
            assert decision.allowed and said in decision.warnings[0]
    assert verifier.resolved == [] and verifier.verified == []
    assert run(review(pod(BERT)), Policies(p), verifier, tenancy=TENANTS).allowed


def test_tenancy_at_admission_pins_nothing_and_looks_nothing_up_of_another_tenant() -> None:
    verifier = Verifier(TAGS, {D1: {"p"}})
    mutating = run(
        review(pod("r.io/models/gpt:v1", "r.io/models/bert:v1"), mutate=True),
        Policies(policy()),
        verifier,
        tenancy=TENANTS,
    )
    assert [op["value"] for op in mutating.patch] == [f"r.io/models/bert@{D1}"]
    assert "may not act on oci://r.io/models/gpt" in mutating.warnings[0]
    theirs = review(model({"gcs": {"uri": "gs://theirs/m/1/"}}), "Model")
    refused = run(theirs, Policies(), verifier, tenancy=TENANTS)
    assert not refused.allowed and refused.code == 403
    assert "Model ns/p: gs://theirs/m/1/: namespace 'ns' may not act on gs://theirs" in (
        refused.message
    )
    registry = InMemoryModelRegistry()  # a registered model whose artifact is theirs
    gpt = registry.create_model("gpt", properties={})
    registry.create_version(gpt.id, "1", properties={"uri": "oci://r.io/models/gpt:v1"})
    by_name = pod(**{"modelhooks.dev/model": "gpt/1"})
    named = run(review(by_name), Policies(policy()), verifier, registry=registry, tenancy=TENANTS)
    assert not named.allowed and "may not act on oci://r.io/models/gpt" in named.message
    assert verifier.resolved == ["oci://r.io/models/bert:v1"]  # nothing of theirs


def test_a_model_source_tag_is_pinned() -> None:
    verifier = Verifier(TAGS, {})
    pinned = run(
        review(model({"oci": {"reference": "r.io/models/bert:v1"}}), "Model", mutate=True),
        Policies(),
        verifier,
    )
    assert list(pinned.patch) == [
        {"op": "replace", "path": "/spec/source/oci/reference", "value": f"r.io/models/bert@{D1}"}
    ]


def test_a_denial_is_confirmed_against_the_policies_as_they_are_now() -> None:
    """A cache that has not seen a policy created a moment ago does not deny by it; an allow
    from the cache needs no apiserver call."""
    verifier = Verifier(TAGS, {D1: {"p"}})
    source = Policies(policy(), cached=[])
    assert run(review(pod(BERT)), source, verifier).allowed
    assert source.fresh_reads == 1
    steady = Policies(policy(), cached=[policy()])
    assert run(review(pod(BERT)), steady, verifier).allowed
    assert steady.fresh_reads == 0
    denied = Policies(policy(), cached=[policy()])
    assert not run(review(pod("r.io/models/gpt:v1")), denied, verifier).allowed
    assert denied.fresh_reads == 1 and verifier.verified.count((D2, "p")) == 1  # not redone


def model_validation(config: dict[str, Any]) -> Policy:
    """An MVO ModelValidation (ml.sigstore.dev/v1alpha1), fields as its CRD names them."""
    return Policy.from_model_validation(
        {
            "apiVersion": "ml.sigstore.dev/v1alpha1",
            "kind": "ModelValidation",
            "metadata": {"name": "bert", "namespace": "ns", "uid": "mv", "resourceVersion": "7"},
            "spec": {
                "model": {"path": "/data/bert", "signaturePath": "/data/bert/model.sig"},
                "config": config,
            },
        }
    )


def test_an_mvo_model_validation_is_a_policy_for_the_pods_with_its_label() -> None:
    from modelhooks.core.verification import MVO_LABEL, Identity

    keyless = model_validation(
        {
            "sigstoreConfig": {
                "certificateIdentity": "ci@example.com",
                "certificateOidcIssuer": "https://i",
            }
        }
    )
    assert keyless.identities == (Identity(issuer="https://i", subject="ci@example.com"),)
    assert keyless.shown == "ModelValidation ns/bert" and not keyless.refusal
    assert keyless.verify_on == "node"  # as MVO verifies: an init container on the node
    verifier = Verifier(TAGS, {})
    labelled = pod("r.io/models/bert:v1", labels={MVO_LABEL: "bert"})
    mutating = run(review(labelled, mutate=True), Policies(keyless), verifier)
    (added,) = [op for op in mutating.patch if op["path"] == "/spec/initContainers"]
    (init,) = added["value"]
    assert '"identities":[{"issuer":"https://i","subject":"ci@example.com"}]' in str(init["env"])
    assert not run(review(labelled), Policies(keyless), verifier).allowed  # without it
    labelled["spec"]["initContainers"] = [init]
    assert run(review(labelled), Policies(keyless), verifier).allowed
    other = run(
        review(pod("r.io/models/bert:v1", labels={MVO_LABEL: "gpt"})), Policies(keyless), verifier
    )
    assert not other.allowed and "no VerificationPolicy" in other.message  # not its Pods

    by_file = model_validation({"publicKeyConfig": {"keyPath": "/keys/pub.pem"}})
    refused = run(review(labelled), Policies(by_file), Verifier(TAGS, {D1: {"bert"}}))
    assert not refused.allowed
    assert "ModelValidation ns/bert" in refused.message and "/keys/pub.pem" in refused.message
    assert "cannot read" in refused.message
