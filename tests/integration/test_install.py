"""The Knative install as infra/README.md runs it, `kubectl apply -k infra/`, on a REAL
kube-apiserver of this module's own with Knative Serving's and Eventing's CRDs installed
(from Knative's Go modules), kubectl's current namespace being ANOTHER one, as a user's
often is; and the same manifests validated by kubeconform against strict JSON schemas
(ours, Knative's, the apiserver's built-in kinds: tests/integration/manifests.py):

- what kubectl renders is valid for every schema, and a misspelt field is not;
- every namespaced object lands in `modelhooks` (none in the current namespace), the
  cluster-scoped ones are cluster-scoped;
- every ServiceAccount a Service or the ApiServerSource runs as exists; every RBAC subject
  is a ServiceAccount that exists in the namespace it names, every roleRef a role that
  exists; every Knative reference (subscribers, dead-letter sinks, sinks, the SinkBinding's
  subject) names an object of the install;
- infra/README's `kubectl wait` names every CRD of infra/k8s/crds, and its check lists the
  Knative objects of the install;
- infra/examples: together a Model per source kind and per deletion policy; each file valid
  for kubeconform and applied (the server's validation, CEL included, accepts it).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration import manifests
from tests.integration.manifests import INFRA, Kubectl, documents, key
from tests.servers.fixtures import _serve
from tests.servers.kube import KubeApiServer, start_kube

pytestmark = pytest.mark.integration

HOME = "modelhooks"  # the install's namespace
ELSEWHERE = "someone-elses"  # kubectl's current namespace while installing
CRDS = INFRA / "k8s" / "crds"
EXAMPLES = INFRA / "examples"
JOB = INFRA / "k8s" / "transfer" / "job.yaml"  # the async-upload Job, applied on its own


def _examples() -> list[Path]:
    """What is applied on its own, never by a kustomization: infra/examples and the Job."""
    return [*sorted(EXAMPLES.glob("*.yaml")), JOB]


README = (INFRA / "README.md").read_text()


def _ref(doc: dict[str, Any]) -> str:
    """kubectl's TYPE.VERSION.GROUP/NAME of a manifest (TYPE/NAME for the core group)."""
    group, _, version = doc["apiVersion"].rpartition("/")
    kind = f"{doc['kind']}.{version}.{group}" if group else doc["kind"]
    return f"{kind}/{doc['metadata']['name']}"


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeApiServer]:
    """An apiserver for this module alone: the install and the example Models must not meet
    the watches and RBAC checks of other modules."""
    yield from _serve(request, tmp_path_factory, ("etcd", "kube-apiserver"), start_kube)


@pytest.fixture(scope="module")
def kubectl(cluster: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """kubectl as a user has it: Knative's CRDs installed, the current namespace not ours."""
    run = Kubectl(cluster, tmp_path_factory.mktemp("kubectl"))
    for name in ("knative-serving-crds", "knative-eventing-crds"):
        run("create", "-f", str(manifests.tool(name)))
    run("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    run("create", "namespace", ELSEWHERE)
    run("config", "set-context", "--current", f"--namespace={ELSEWHERE}")
    return run


@pytest.fixture(scope="module")
def rendered(kubectl: Kubectl) -> list[dict[str, Any]]:
    """What `kubectl apply -k infra/` applies (kubectl's own kustomize)."""
    return documents(kubectl("kustomize", "infra/"))


def _readme_line(pattern: str) -> str:
    (line,) = re.findall(pattern, README, re.MULTILINE)
    return str(line)


@pytest.fixture(scope="module")
def installed(kubectl: Kubectl) -> str:
    """infra/README's steps 1 and 4: the CRDs, its `kubectl wait`, then the kustomization."""
    kubectl("apply", "-f", "infra/k8s/crds/")
    kubectl.shell(_readme_line(r"^(kubectl wait --for=condition=Established .*)$"))
    return kubectl("apply", "-k", "infra/")


@pytest.fixture(scope="module")
def namespaced(kubectl: Kubectl) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every namespaced kind the apiserver serves (its discovery)."""
    rows = kubectl("api-resources", "--namespaced=true", "--no-headers").splitlines()
    return {(row.split()[-3], row.split()[-1]) for row in rows}


@pytest.fixture(scope="module")
def schemas(cluster: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """kubeconform's -schema-location: every CRD's (ours, Knative's) and the built-in kinds
    the manifests use, from this apiserver's OpenAPI."""
    crds = manifests.crds(
        CRDS, manifests.tool("knative-serving-crds"), manifests.tool("knative-eventing-crds")
    )
    custom = [schema for crd in crds for schema in manifests.crd_schemas(crd)]
    defined = {kind for kind, _ in custom}
    files = [*(INFRA / "k8s").rglob("*.yaml"), *(INFRA / "knative").glob("*.yaml")]
    files += sorted(EXAMPLES.glob("*.yaml"))
    files = [f for f in files if f.name != "kustomization.yaml"]  # kustomize's, not the cluster's
    used = {key(d) for f in files for d in documents(f.read_text())} - defined
    builtin = list(manifests.builtin_schemas(manifests.openapi_v2(cluster), used))
    assert {kind for kind, _ in builtin} == used, "the apiserver defines no schema for some"
    yield manifests.write_schemas(tmp_path_factory.mktemp("schemas"), [*custom, *builtin])


# --- kubeconform --------------------------------------------------------------------------


def _valid(report: dict[str, Any], count: int) -> None:
    problems = [r for r in report["resources"] if r["status"] != "statusValid"]
    assert not problems, json.dumps(problems, indent=1)
    assert report["summary"]["valid"] == count and report["exit"] == 0, report["summary"]


def test_the_rendered_install_is_valid_for_the_schemas(
    rendered: list[dict[str, Any]], schemas: str
) -> None:
    _valid(manifests.kubeconform(schemas, yaml.safe_dump_all(rendered)), len(rendered))


def _misspelt(rendered: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """One document per schema source with a field misspelt (a key a user could mistype)."""
    by_kind = {doc["kind"]: doc for doc in rendered}
    knative = [d for d in rendered if d["apiVersion"].startswith("serving.knative.dev/")]
    service = copy.deepcopy(knative[0])  # Knative Serving's CRD (not a core v1 Service)
    pod = service["spec"]["template"]["spec"]
    pod["serviceAcountName"] = pod.pop("serviceAccountName")
    yield "Service", service
    trigger = copy.deepcopy(by_kind["Trigger"])  # Knative Eventing's CRD
    trigger["spec"]["subscribers"] = trigger["spec"].pop("subscriber")
    yield "Trigger", trigger
    binding = copy.deepcopy(by_kind["ClusterRoleBinding"])  # the apiserver's OpenAPI
    binding["subjects"][0]["namepsace"] = binding["subjects"][0].pop("namespace")
    yield "ClusterRoleBinding", binding
    claim = copy.deepcopy(by_kind["PersistentVolumeClaim"])
    claim["spec"]["resources"]["requests"]["storage"] = {"size": "1Gi"}  # a Quantity
    yield "PersistentVolumeClaim", claim
    model = yaml.safe_load((EXAMPLES / "model-gcs.yaml").read_text())  # our CRD
    model["spec"]["deletePolicy"] = model["spec"].pop("deletionPolicy")
    yield "Model", model


def test_the_schemas_refuse_a_misspelt_field(rendered: list[dict[str, Any]], schemas: str) -> None:
    for kind, doc in _misspelt(rendered):
        report = manifests.kubeconform(schemas, yaml.safe_dump(doc))
        (result,) = report["resources"]
        assert result["status"] == "statusInvalid", (kind, result)
        assert report["exit"] != 0


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.name)
def test_each_example_is_valid_for_the_schemas(path: Path, schemas: str) -> None:
    text = path.read_text()
    _valid(manifests.kubeconform(schemas, text), len(documents(text)))


# --- the install on the apiserver ------------------------------------------------------------


def test_every_namespaced_object_lands_in_modelhooks(
    installed: str,
    kubectl: Kubectl,
    rendered: list[dict[str, Any]],
    namespaced: set[tuple[str, str]],
) -> None:
    inside = [d for d in rendered if key(d) in namespaced]
    outside = [d for d in rendered if key(d) not in namespaced]
    assert inside and outside
    assert {d["metadata"].get("namespace") for d in inside} == {HOME}
    assert not [d for d in outside if "namespace" in d["metadata"]]
    assert {d["kind"] for d in outside} == {
        "CustomResourceDefinition", "Namespace", "ClusterRole", "ClusterRoleBinding",
        "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",  # admission's
    }  # fmt: skip
    refs = [_ref(d) for d in inside]
    found = kubectl("get", "-n", HOME, *refs, "-o", "name").split()
    assert len(found) == len(inside), found
    stray = kubectl("get", "-n", ELSEWHERE, *refs, "--ignore-not-found", "-o", "name")
    assert not stray, f"in kubectl's current namespace {ELSEWHERE!r}: {stray}"
    kubectl("get", *(_ref(d) for d in outside), "-o", "name")  # all there


def test_every_identity_the_install_names_exists(
    installed: str, kubectl: Kubectl, rendered: list[dict[str, Any]]
) -> None:
    accounts: set[tuple[str, str]] = set()  # (namespace, name) something runs as
    for doc in rendered:
        namespace = doc["metadata"].get("namespace")
        if key(doc) == ("serving.knative.dev/v1", "Service"):
            accounts.add((namespace, doc["spec"]["template"]["spec"]["serviceAccountName"]))
        elif doc["kind"] == "ApiServerSource":
            accounts.add((namespace, doc["spec"]["serviceAccountName"]))
    assert len(accounts) == 9  # six functions, the ingress, the dead letters, the source
    bindings = [d for d in rendered if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    subjects = {(s["namespace"], s["name"]) for b in bindings for s in b["subjects"]}
    assert {s["kind"] for b in bindings for s in b["subjects"]} == {"ServiceAccount"}
    assert {namespace for namespace, _ in accounts | subjects} == {HOME}
    kubectl("get", "-n", HOME, *(f"serviceaccount/{name}" for _, name in accounts | subjects))
    roles = {(b["metadata"].get("namespace", ""), b["roleRef"]["kind"], b["roleRef"]["name"])
             for b in bindings}  # fmt: skip
    for namespace, kind, name in roles:
        kubectl("get", *(["-n", namespace] if namespace else []), f"{kind}/{name}")


_REFERENCES = (  # where Knative objects point at other objects: (kind, path to a ref)
    ("Trigger", ("spec", "subscriber", "ref")),
    ("Trigger", ("spec", "delivery", "deadLetterSink", "ref")),
    ("Broker", ("spec", "delivery", "deadLetterSink", "ref")),
    ("ApiServerSource", ("spec", "sink", "ref")),
    ("SinkBinding", ("spec", "sink", "ref")),
    ("SinkBinding", ("spec", "subject")),
)


def test_every_knative_reference_names_an_object_of_the_install(
    rendered: list[dict[str, Any]],
) -> None:
    objects = {(*key(d), d["metadata"].get("namespace"), d["metadata"]["name"]) for d in rendered}
    checked = 0
    for kind, path in _REFERENCES:
        for doc in (d for d in rendered if d["kind"] == kind):
            ref = doc
            for step in path:
                ref = ref[step]
            namespace = ref.get("namespace", doc["metadata"].get("namespace"))  # Knative's
            target = (ref["apiVersion"], ref["kind"], namespace, ref["name"])
            assert namespace == HOME, f"{doc['metadata']['name']}: {'.'.join(path)} {target}"
            assert target in objects, f"{doc['metadata']['name']}: {'.'.join(path)} {target}"
            checked += 1
    triggers = [d for d in rendered if d["kind"] == "Trigger"]
    assert triggers and checked == 2 * len(triggers) + 4


def test_the_readme_waits_for_every_crd_and_checks_the_install(
    installed: str, kubectl: Kubectl, rendered: list[dict[str, Any]]
) -> None:
    wait = _readme_line(r"^(kubectl wait --for=condition=Established .*)$")  # run by `installed`
    ours = {f"crd/{d['metadata']['name']}" for d in manifests.crds(CRDS)}
    assert set(re.findall(r"crd/[\w.]+", wait)) == ours
    check = _readme_line(r"^Check: `(kubectl -n \S+ get [\w,]+)`")
    listed = set(kubectl.shell(check + " -o name").split())
    shown = {"Service", "Broker", "Trigger", "ApiServerSource", "SinkBinding"}
    expected = {
        f"{d['kind'].lower()}.{d['apiVersion'].split('/')[0]}/{d['metadata']['name']}"
        for d in rendered
        if d["kind"] in shown and "knative.dev" in d["apiVersion"]
    }
    assert listed == expected


# --- infra/examples -------------------------------------------------------------------------


def _models() -> list[dict[str, Any]]:
    return [d for p in sorted(EXAMPLES.glob("model-*.yaml")) for d in documents(p.read_text())]


def test_the_examples_have_a_model_per_source_kind_and_deletion_policy() -> None:
    from modelhooks.core.sources import model_source

    (crd,) = [d for d in manifests.crds(CRDS) if d["spec"]["names"]["kind"] == "Model"]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    kinds = set(spec["properties"]["source"]["properties"]) - {"secretRef"}
    policies = set(spec["properties"]["deletionPolicy"]["enum"])
    models = _models()
    assert {k for m in models for k in m["spec"]["source"] if k != "secretRef"} == kinds
    default = spec["properties"]["deletionPolicy"]["default"]
    assert {m["spec"].get("deletionPolicy", default) for m in models} == policies
    assert any("retention" in m["spec"] for m in models)
    assert any(m["spec"].get("signing", {}).get("enabled") for m in models)
    assert any("secretRef" in m["spec"]["source"] for m in models)
    for model in models:  # and the functions read each source as the server accepts it
        model_source(model["spec"]["source"])


def test_the_examples_apply_to_the_installed_cluster(installed: str, kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "infra/examples/namespace.yaml")
    for path in _examples():
        out = kubectl("apply", "-f", str(path.relative_to(INFRA.parent)))
        assert out.strip(), path.name
    models = json.loads(kubectl("get", "models", "-A", "-o", "json"))["items"]
    by_name = {m["metadata"]["name"]: m for m in models}
    assert {m["metadata"]["namespace"] for m in models} == {"ml"}
    assert set(by_name) == {m["metadata"]["name"] for m in _models()}
    assert by_name["bert-base"]["spec"]["deletionPolicy"] == "Retain"  # the server's default
    (namespace,) = documents((EXAMPLES / "namespace.yaml").read_text())[:1]
    labels = json.loads(kubectl("get", "namespace", "ml", "-o", "json"))["metadata"]["labels"]
    assert labels.items() >= namespace["metadata"]["labels"].items()
    # the namespace's RoleBindings lend roles of the install to identities of the install
    for binding in documents((EXAMPLES / "namespace.yaml").read_text())[1:]:
        kubectl("get", f"clusterrole/{binding['roleRef']['name']}")
        for subject in binding["subjects"]:
            kubectl("get", "-n", subject["namespace"], f"serviceaccount/{subject['name']}")
    kubectl("get", "-n", HOME, "pingsource/prune-models-sentiment")
