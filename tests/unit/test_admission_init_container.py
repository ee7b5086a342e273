"""`verifyOn: node` policies in the admission handler (pure, over the fakes of
test_admission.py): the mutating webhook adds one init container per covered image volume
(idempotent under reinvocation, in pod templates too, never for an uncovered volume), and the
validating webhook skips the signature check of such a reference but denies a workload
without exactly that container."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from modelhooks.cli import main
from modelhooks.core.errors import ConfigError
from modelhooks.core.node_verification import TRUST_ENV, container_name, trust
from modelhooks.core.verification import Policy
from tests.unit.signing_material import make_chain, make_key, write_model
from tests.unit.test_admission import D1, TAGS, Policies, Verifier, pod, policy, review, run

IMAGE = "r.io/modelhooks:1"


def on_node(name: str = "n", **spec: Any) -> Policy:
    return policy(name, verifyOn="node", **spec)


def apply(obj: dict[str, Any], patch: tuple[Any, ...]) -> dict[str, Any]:
    """A JSONPatch (add / replace, as admission answers) applied as the apiserver would."""
    obj = copy.deepcopy(obj)
    for op in patch:
        *parents, last = op["path"].lstrip("/").split("/")
        node: Any = obj
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if op["op"] == "add":
                node.insert(index, op["value"])
            else:
                node[index] = op["value"]
        else:
            node[last] = op["value"]
    return obj


def mutated(
    obj: dict[str, Any], policies: Policies, kind: str = "Pod", **kw: Any
) -> dict[str, Any]:
    decision = run(review(obj, kind, mutate=True), policies, Verifier(TAGS, {}), **kw)
    assert decision.allowed, decision.message
    return apply(obj, decision.patch)


def test_the_policy_reads_verify_on_admission_by_default() -> None:
    assert policy().verify_on == "admission"
    assert on_node().verify_on == "node"
    with pytest.raises(ConfigError, match="verifyOn 'hash'"):
        policy(verifyOn="hash")


def test_a_covered_image_volume_gets_one_init_container_verifying_it_with_the_trust() -> None:
    obj = mutated(pod("r.io/models/bert:v1"), Policies(on_node()))
    assert obj["spec"]["volumes"][0]["image"]["reference"] == f"r.io/models/bert@{D1}"  # pinned
    (init,) = obj["spec"]["initContainers"]
    assert init == {
        "name": "modelhooks-verify-m0",
        "image": IMAGE,
        "command": ["modelhooks", "verify", "/modelhooks/model", "--quiet"],
        "env": [{"name": "MODELHOOKS_VERIFY_TRUST", "value": init["env"][0]["value"]}],
        "volumeMounts": [{"name": "m0", "mountPath": "/modelhooks/model", "readOnly": True}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    assert json.loads(init["env"][0]["value"]) == {"keys": [{"name": "n/team", "pem": "PEM"}]}


def test_the_trust_of_every_covering_node_policy_is_passed_each_one_required() -> None:
    """Several node policies covering a volume were passed as one union (any key of any of
    them verified it): a loose policy the workload's author labelled it into beside a strict
    one bypassed the strict one on the node too. Each is now a group of its own."""
    chain = {"certificateChains": [{"name": "ca", "pem": "CA"}]}
    identity = {"identities": [{"issuer": "https://i", "subjectRegExp": ".*@team"}]}
    obj = mutated(
        pod("r.io/models/bert:v1"), Policies(on_node("a", **chain), on_node("b", **identity))
    )
    (init,) = obj["spec"]["initContainers"]
    assert json.loads(init["env"][0]["value"]) == {
        "allOf": [
            {
                "name": "VerificationPolicy ns/a",
                "keys": [{"name": "a/team", "pem": "PEM"}],
                "certificateChains": [{"name": "a/ca", "pem": "CA"}],
            },
            {
                "name": "VerificationPolicy ns/b",
                "keys": [{"name": "b/team", "pem": "PEM"}],
                "identities": [{"issuer": "https://i", "subjectRegExp": ".*@team"}],
            },
        ]
    }


def test_a_private_sigstore_root_goes_with_identities_only() -> None:
    """The admission function's private Sigstore root is passed inline (the init container
    can reach neither its files nor its TUF repository), read only when an identity needs
    it; the validating webhook expects the same container."""
    asked: list[str] = []

    def root() -> str:
        asked.append("root")
        return json.dumps(
            {"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}
        )

    identity = {"identities": [{"issuer": "https://i", "subject": "me@team"}]}
    obj = pod("r.io/models/bert:v1")
    keys_only = mutated(obj, Policies(on_node("a")), verifier_root=root)
    assert "trustedRoot" not in json.loads(
        keys_only["spec"]["initContainers"][0]["env"][0]["value"]
    )
    assert asked == []
    withid = mutated(obj, Policies(on_node("b", **identity)), verifier_root=root)
    passed = json.loads(withid["spec"]["initContainers"][0]["env"][0]["value"])
    assert passed["trustedRoot"] == json.loads(root())
    policies = Policies(on_node("b", **identity))
    assert run(review(withid), policies, Verifier(TAGS, {}), verifier_root=root).allowed
    public = run(review(withid), policies, Verifier(TAGS, {}))  # a webhook of another root
    assert not public.allowed and "modelhooks-verify-" in public.message


def test_reinvocation_adds_nothing_more() -> None:
    policies = Policies(on_node())
    once = mutated(pod("r.io/models/bert:v1"), policies)
    again = run(review(once, mutate=True), policies, Verifier(TAGS, {}))
    assert again.allowed and again.patch == ()
    assert len(apply(once, again.patch)["spec"]["initContainers"]) == 1


def test_templates_get_it_first_among_their_own_init_containers() -> None:
    template = pod("r.io/models/bert:v1", "r.io/models/gpt:v1")
    template["spec"]["initContainers"] = [{"name": "download", "image": "busybox"}]
    deployment = {"metadata": {"name": "d"}, "spec": {"template": template}}
    obj = mutated(deployment, Policies(on_node()), "Deployment")
    names = [c["name"] for c in obj["spec"]["template"]["spec"]["initContainers"]]
    assert names == ["modelhooks-verify-m0", "modelhooks-verify-m1", "download"]
    cron = {"spec": {"jobTemplate": {"spec": {"template": pod("r.io/models/bert:v1")}}}}
    obj = mutated(cron, Policies(on_node()), "CronJob")
    spec = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["modelhooks-verify-m0"]


def test_uncovered_volumes_and_admission_policies_add_no_init_container() -> None:
    node_gpt = on_node(references=["oci://r.io/models/gpt*"])
    obj = mutated(pod("r.io/models/bert:v1", "r.io/models/gpt:v1"), Policies(node_gpt, policy()))
    assert [c["name"] for c in obj["spec"]["initContainers"]] == ["modelhooks-verify-m1"]
    obj = mutated(pod("r.io/models/bert:v1"), Policies(policy()))  # verifyOn: admission
    assert "initContainers" not in obj["spec"]
    selective = on_node(workloadSelector={"matchLabels": {"verify": "node"}})
    obj = mutated(pod("r.io/models/bert:v1"), Policies(selective))
    assert "initContainers" not in obj["spec"]
    labelled = mutated(pod("r.io/models/bert:v1", labels={"verify": "node"}), Policies(selective))
    assert len(labelled["spec"]["initContainers"]) == 1


def test_validating_skips_the_signature_but_denies_a_pod_without_its_init_container() -> None:
    policies, verifier = Policies(on_node()), Verifier(TAGS, {})  # nothing is signed
    obj = mutated(pod("r.io/models/bert:v1"), policies)
    assert run(review(obj), policies, verifier).allowed  # decided on the node
    assert verifier.verified == []

    bare = pod(f"r.io/models/bert@{D1}")  # the mutating webhook (Ignore) did not run
    denied = run(review(bare), policies, verifier)
    assert not denied.allowed
    for part in (
        f"oci://r.io/models/bert@{D1}",
        "VerificationPolicy ns/n",
        "verifyOn: node",
        "no init container modelhooks-verify-m0",
        "mutating webhook",
    ):
        assert part in denied.message


def test_an_init_container_of_that_name_doing_something_else_is_denied() -> None:
    policies = Policies(on_node())
    obj = mutated(pod("r.io/models/bert:v1"), policies)
    obj["spec"]["initContainers"][0]["command"] = ["true"]
    denied = run(review(obj), policies, Verifier(TAGS, {}))
    assert not denied.allowed
    assert "modelhooks-verify-m0 is not the one the policy needs (command differ" in denied.message
    for change, field in (
        ({"args": ["--help"]}, "args"),
        ({"envFrom": [{"configMapRef": {"name": "x"}}]}, "envFrom"),
        ({"volumeMounts": [{"name": "good", "mountPath": "/modelhooks/model/w"}]}, "volumeMounts"),
    ):
        obj = mutated(pod("r.io/models/bert:v1"), policies)
        init = obj["spec"]["initContainers"][0]
        for key, value in change.items():
            init[key] = init.get(key, [])[:] + value if key == "volumeMounts" else value
        assert f"({field} differ" in run(review(obj), policies, Verifier(TAGS, {})).message
    obj = mutated(pod("r.io/models/bert:v1"), policies)  # what the apiserver adds is fine
    token = {
        "name": "kube-api-access-x",
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        "readOnly": True,
    }
    obj["spec"]["initContainers"][0]["volumeMounts"].append(token)
    obj["spec"]["initContainers"][0].update(imagePullPolicy="IfNotPresent", resources={})
    assert run(review(obj), policies, Verifier(TAGS, {})).allowed
    trusting_more = Policies(on_node(), on_node("other"))  # the trust changed since
    obj = mutated(pod("r.io/models/bert:v1"), policies)
    assert "(env differ" in run(review(obj), trusting_more, Verifier(TAGS, {})).message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"restartPolicy": "Always"}, "restartPolicy"),  # a sidecar: nothing waits for it
        ({"workingDir": "/tmp"}, "workingDir"),
        ({"lifecycle": {"postStart": {"exec": {"command": ["true"]}}}}, "lifecycle"),
        ({"mount": {"mountPath": "/usr/local/bin", "readOnly": True}}, "volumeMounts"),
        ({"mount": {"mountPath": "/var/run/secrets/../../usr/lib"}}, "volumeMounts"),
        ({"mount": {"mountPath": "/var/run/secrets/x", "readOnly": False}}, "volumeMounts"),
    ],
)
def test_one_of_that_name_with_more_than_ours_is_not_ours(
    change: dict[str, Any], field: str
) -> None:
    """A hand-written container passing as ours: as a sidecar the Pod's containers start
    before it has verified anything; a volume mounted over the verifier's programs replaces
    what runs (an emptyDir an earlier init container filled with a `modelhooks` that exits 0)."""
    policies = Policies(on_node())
    obj = mutated(pod("r.io/models/bert:v1"), policies)
    obj["spec"]["volumes"].append({"name": "bin", "emptyDir": {}})
    init = obj["spec"]["initContainers"][0]
    if "mount" in change:
        init["volumeMounts"].append({"name": "bin", **change.pop("mount")})
    init.update(change)
    denied = run(review(obj), policies, Verifier(TAGS, {}))
    assert not denied.allowed
    assert f"modelhooks-verify-m0 is not the one the policy needs ({field} differ" in denied.message
    assert (
        mutated(obj, policies)["spec"]["initContainers"][0]
        == mutated(pod("r.io/models/bert:v1"), policies)["spec"]["initContainers"][0]
    )  # the mutating webhook puts ours in its place


@pytest.mark.parametrize("restart", [None, "Always"])
def test_ours_after_an_init_container_mounting_the_model_is_denied_and_put_first(
    restart: str | None,
) -> None:
    """An init container before ours that mounts the model reads it unverified: a batch job
    run as an init container, or a sidecar (restartPolicy: Always) serving it while ours
    fails and restarts. One that does not mount it may come first (a template stays as it is)."""
    policies = Policies(on_node())
    obj = mutated(pod("r.io/models/bert:v1"), policies)
    early = {"name": "serve", "image": "r.io/server", "restartPolicy": restart}
    early["volumeMounts"] = [{"name": "m0", "mountPath": "/model"}]
    obj["spec"]["initContainers"].insert(0, {k: v for k, v in early.items() if v})
    denied = run(review(obj), policies, Verifier(TAGS, {}))
    assert not denied.allowed
    assert "modelhooks-verify-m0 runs after init container serve, which mounts the model" in (
        denied.message
    )
    fixed = mutated(obj, policies)
    assert [c["name"] for c in fixed["spec"]["initContainers"]] == ["modelhooks-verify-m0", "serve"]
    assert run(review(fixed), policies, Verifier(TAGS, {})).allowed
    del obj["spec"]["initContainers"][0]["volumeMounts"]  # it does not read the model
    assert run(review(obj), policies, Verifier(TAGS, {})).allowed
    assert run(review(obj, mutate=True), policies, Verifier(TAGS, {})).patch == ()


def test_an_admission_policy_covering_it_too_still_verifies_at_admission() -> None:
    policies = Policies(on_node(), policy("a"))
    obj = mutated(pod("r.io/models/bert:v1"), policies)
    denied = run(review(obj), policies, Verifier(TAGS, {}))  # not signed for "a"
    assert not denied.allowed and "VerificationPolicy ns/a" in denied.message
    assert run(review(obj), policies, Verifier(TAGS, {D1: {"a"}})).allowed


def test_one_model_in_thousands_of_volumes_is_refused_not_answered_with_a_huge_patch() -> None:
    """Each covered volume gets an init container carrying the trust (a private Sigstore's
    root inline): a 2.7 MB Pod of 20,000 volumes naming one model was answered with a 173 MB
    patch (1.4 s, 561 MB at the peak), its denial 7.3 MB long."""
    root = json.dumps({"tlogs": [{"publicKey": "x" * 8000}]})
    policies = Policies(on_node(identities=[{"issuer": "https://i", "subject": "s"}]))
    for mutate in (True, False):
        many = review(pod(*[f"r.io/models/bert@{D1}"] * 20_000), mutate=mutate)
        decision = run(many, policies, Verifier(TAGS, {}), verifier_root=lambda: root)
        assert not decision.allowed and decision.code == 400 and not decision.patch
        assert "names models 20000 times (volumes, storageUris, annotations): more than 256" in (
            decision.message
        )
    decision = run(
        review(pod(*[f"r.io/models/bert@{D1}"] * 256), mutate=True),
        policies,
        Verifier(TAGS, {}),
        verifier_root=lambda: root,
    )
    assert len(decision.patch[0]["value"]) == 256


def test_long_volume_names_give_dns_label_container_names() -> None:
    long = "v" * 63
    name = container_name(long)
    assert len(name) == 63 and name.startswith("modelhooks-verify-v")
    assert container_name(long) == name != container_name("v" * 62 + "w")


def test_verify_trusts_what_a_policy_trusts_any_of_it_and_every_policy_of_several(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The init container's command: `modelhooks verify DIR` with MODELHOOKS_VERIFY_TRUST
    (or --trust-json) holding the policies' trust, as the mutating webhook writes it: any of
    one policy's keys, chains or identities; every one of several policies (the model signed
    by the key of one policy alone was accepted by the union of all three)."""
    model, signer, other = (
        write_model(tmp_path / "bert"),
        make_key(tmp_path),
        make_key(tmp_path, "o"),
    )
    chain = make_chain(tmp_path)
    assert main(["sign", str(model), "--key", str(signer.private), "--quiet"]) == 0
    ours = {"name": "k", "pem": signer.public.read_text()}
    theirs = {"name": "k", "pem": other.public.read_text()}
    policies = [
        on_node("a", keys=[theirs]),
        on_node("b", keys=[ours]),
        on_node("c", keys=[], certificateChains=[{"name": "ca", "pem": chain.root.read_text()}]),
    ]
    monkeypatch.setenv(TRUST_ENV, json.dumps(trust(policies)))
    assert main(["verify", str(model), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "VerificationPolicy ns/a is not satisfied: no signer it trusts (key a/k)" in out
    both = [on_node("a", keys=[theirs, ours]), on_node("b", keys=[ours])]
    monkeypatch.setenv(TRUST_ENV, json.dumps(trust(both)))
    assert main(["verify", str(model), "--quiet"]) == 0
    assert "verdict: OK" in capsys.readouterr().out
    only_other = json.dumps(trust(policies[:1]))
    assert main(["verify", str(model), "--quiet", "--trust-json", only_other]) == 1
    assert "no signer it trusts (key a/k) signed it" in capsys.readouterr().out
    # the single group an init container written before allOf holds: any of it
    union = json.dumps({"keys": [{"name": "a/k", **theirs}, {"name": "b/k", **ours}]})
    assert main(["verify", str(model), "--quiet", "--trust-json", union]) == 0
    capsys.readouterr()
    for bad in (
        "not json",
        "{}",
        "[]",
        '{"allOf": []}',
        '{"allOf": {}}',
        '{"allOf": [5]}',
        '{"allOf": [{}]}',
        json.dumps({"allOf": [{"keys": [ours]}], "keys": [theirs]}),
    ):
        assert main(["verify", str(model), "--quiet", "--trust-json", bad]) == 2, bad
    (model / "config.json").write_text("{}")
    assert main(["verify", str(model), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "config.json" in out


def test_a_pod_update_is_not_patched_nor_asked_for_an_init_container_it_cannot_add() -> None:
    """A Pod's volumes and init containers are immutable: a Pod created before the policy is
    still labelled, annotated, … (a patch would make the apiserver refuse the update)."""
    policies, verifier = Policies(on_node()), Verifier(TAGS, {})
    running = pod("r.io/models/bert:v1")
    updated = run(review(running, mutate=True, operation="UPDATE"), policies, verifier)
    assert updated.allowed and updated.patch == ()
    assert run(review(running, operation="UPDATE"), policies, verifier).allowed
    assert not run(review(running), policies, verifier).allowed  # created so: denied
    template = {"spec": {"template": running}}  # a Deployment's template can change
    changed = run(
        review(template, "Deployment", mutate=True, operation="UPDATE"), policies, verifier
    )
    assert any(op["path"] == "/spec/template/spec/initContainers" for op in changed.patch)


def test_one_of_that_name_not_the_one_needed_is_replaced_by_the_mutating_webhook() -> None:
    """A template that got the container before its policy's trust changed (its new Pods
    would be denied forever), or a container written by hand: replaced, in place."""
    before = mutated(pod("r.io/models/bert:v1"), Policies(on_node()))
    before["spec"]["initContainers"].append({"name": "download", "image": "busybox"})
    now = Policies(on_node(), on_node("other"))
    after = mutated(before, now)
    (verify, download) = after["spec"]["initContainers"]
    assert download["name"] == "download" and verify["name"] == "modelhooks-verify-m0"
    assert '"name":"other/team"' in verify["env"][0]["value"]
    assert run(review(after), now, Verifier(TAGS, {})).allowed
    forged = copy.deepcopy(after)
    forged["spec"]["initContainers"][0]["command"] = ["true"]
    assert mutated(forged, now) == after
