"""Every identity of infra/k8s/rbac on a REAL kube-apiserver, with all of infra/k8s/rbac and
infra/k8s/crds applied, acting with its own TokenRequest token:

- what its roles are for is allowed: each rule of each role bound to it in the files (read
  from the YAML, so this follows the files), asked as a SelfSubjectAccessReview AND sent as
  a real request (on an object that does not exist: authorization comes first, so 404 is
  "allowed" and 403 "denied"; writes go with dryRun=All, so nothing changes);
- the steps just beyond are denied (403 naming the identity): declared per identity in
  BEYOND, which every function of the catalog and every ServiceAccount of the files must
  have an entry in (a new function declares its boundary here);
- a role the files define but do not bind (the opt-in ones a namespace owner binds, e.g.
  cleanup's Secrets) grants its rules in the namespace that binds it and nowhere else.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelhooks.handlers import NAMES
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

K8S = Path(__file__).resolve().parents[2] / "infra" / "k8s"
HOME = "modelhooks"  # where infra/k8s/rbac puts the ServiceAccounts
DOCS = [
    d
    for path in sorted((K8S / "rbac").glob("*.yaml"))
    for d in yaml.safe_load_all(path.read_text())
    if isinstance(d, dict)
]
VERSIONS = {
    "": "v1",
    "apps": "v1",
    "events.k8s.io": "v1",
    "modelhooks.dev": "v1alpha1",
    "ml.sigstore.dev": "v1alpha1",
}
CLUSTER_SCOPED = {"namespaces", "clusterverificationpolicies"}
FRESH, EVERYWHERE = None, ""  # Step.namespace: a namespace made for the test, all of them


@dataclass(frozen=True)
class Step:
    """One request as RBAC sees it: ``resource`` may name a subresource (models/status)."""

    verb: str
    resource: str
    group: str = ""
    namespace: str | None = FRESH
    name: str = ""

    def __str__(self) -> str:
        where = {FRESH: "a namespace", EVERYWHERE: "all namespaces"}.get(
            self.namespace, self.namespace
        )
        named = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named} in {where}"


# One step beyond each identity's role: what it must NOT be able to do. Namespace FRESH is a
# namespace of Models; EVERYWHERE is cluster-wide; HOME is the functions' own namespace.
BEYOND: dict[str, tuple[Step, ...]] = {
    "modelhooks-register": (  # reads Models, writes registry records; deletes neither
        Step("delete", "models", "modelhooks.dev"),
        Step("patch", "models", "modelhooks.dev"),
        Step("patch", "models/status", "modelhooks.dev"),
        Step("delete", "registeredmodels", "modelhooks.dev", HOME),
        Step("create", "modelversions", "modelhooks.dev"),  # only in the registry's namespace
        Step("get", "secrets", "", HOME, "modelhooks-registry"),
    ),
    "modelhooks-sign": (  # status, not the Model; the signing key, not other Secrets
        Step("patch", "models", "modelhooks.dev"),
        Step("delete", "models", "modelhooks.dev"),
        Step("get", "secrets", "", HOME, "modelhooks-registry"),
        Step("list", "secrets", "", HOME),
        Step("get", "secrets", "", FRESH, "modelhooks-signing-key"),
        Step("delete", "modelversions", "modelhooks.dev", HOME),
    ),
    "modelhooks-prune": (  # deletes in the registry, never in the cluster; records its plans
        Step("delete", "models", "modelhooks.dev"),
        Step("patch", "models", "modelhooks.dev"),
        Step("get", "secrets", "", HOME, "modelhooks-registry"),
        Step("list", "secrets", "", EVERYWHERE),
        Step("create", "modelversions", "modelhooks.dev"),  # only in the registry's namespace
        Step("delete", "modelversions", "modelhooks.dev", HOME),
    ),
    "modelhooks-cleanup": (  # the finalizer, yes; Secrets only where a namespace opts in
        Step("delete", "models", "modelhooks.dev"),
        Step("get", "secrets", "", FRESH, "credentials"),
        Step("get", "secrets", "", EVERYWHERE, "credentials"),
        Step("list", "secrets", "", EVERYWHERE),
        Step("delete", "secrets", "", FRESH, "credentials"),
        Step("update", "modelversions", "modelhooks.dev", HOME),
    ),
    "modelhooks-notify": (  # status, finalizer and Events; rollout only where opted in
        Step("delete", "models", "modelhooks.dev"),
        Step("update", "models", "modelhooks.dev"),
        Step("list", "secrets", ""),
        Step("patch", "deployments", "apps", FRESH, "serve"),
        Step("delete", "events", "events.k8s.io", FRESH, "noted"),
        Step("create", "events", ""),  # events.k8s.io/v1 only, not the core Events API
    ),
    "modelhooks-admission": (  # reads (Cluster)VerificationPolicies; the review has the object
        Step("list", "models", "modelhooks.dev"),
        Step("list", "pods", ""),
        Step("create", "verificationpolicies", "modelhooks.dev"),
        Step("create", "clusterverificationpolicies", "modelhooks.dev", EVERYWHERE),
        Step("delete", "clusterverificationpolicies", "modelhooks.dev", EVERYWHERE, "p"),
        Step("update", "verificationpolicies", "modelhooks.dev", FRESH, "policy"),
        Step("get", "secrets", "", HOME, "modelhooks-signing-key"),
    ),
    "modelhooks-apiserversource": (  # watches Models and lists namespaces, writes nothing
        Step("patch", "models", "modelhooks.dev"),
        Step("list", "pods", ""),
        Step("get", "secrets", "", HOME, "modelhooks-registry"),
        Step("delete", "namespaces", "", EVERYWHERE, "default"),
    ),
    "modelhooks-transfer": (  # writes registry records; reads no Model and no Secret
        Step("get", "models", "modelhooks.dev", FRESH, "bert"),
        Step("list", "models", "modelhooks.dev", EVERYWHERE),
        Step("get", "secrets", "", HOME, "modelhooks-registry"),
        Step("list", "secrets", "", EVERYWHERE),
        Step("create", "modelversions", "modelhooks.dev"),  # only in the registry's namespace
        Step("delete", "registeredmodels", "modelhooks.dev", HOME),
    ),
    "modelhooks-ingress": (  # talks to no Kubernetes API at all
        Step("get", "models", "modelhooks.dev", FRESH, "bert"),
        Step("list", "models", "modelhooks.dev", EVERYWHERE),
        Step("create", "events", "events.k8s.io"),
        Step("get", "secrets", "", HOME, "modelhooks-ingress-auth"),
    ),
    "modelhooks-dead-letter": (  # talks to no Kubernetes API at all
        Step("get", "models", "modelhooks.dev", FRESH, "bert"),
        Step("list", "models", "modelhooks.dev", EVERYWHERE),
        Step("create", "events", "events.k8s.io"),
        Step("get", "secrets", "", HOME, "modelhooks-registry"),
    ),
}


def _accounts() -> list[str]:
    """The ServiceAccounts of the files, and one for each function of the catalog."""
    declared = {
        d["metadata"]["name"]
        for d in DOCS
        if d["kind"] == "ServiceAccount" and d["metadata"]["namespace"] == HOME
    }
    return sorted(declared | {f"modelhooks-{name}" for name in NAMES})


def _role(kind: str, name: str, namespace: str | None) -> dict[str, Any]:
    for d in DOCS:
        meta = d["metadata"]
        if d["kind"] == kind and meta["name"] == name and meta.get("namespace") == namespace:
            return d
    raise AssertionError(f"infra/k8s/rbac binds {kind} {name}, which it does not define")


def _steps(role: dict[str, Any], namespace: str | None) -> list[Step]:
    return [
        Step(verb, resource, group, namespace, name)
        for rule in role.get("rules", [])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames", [""])
    ]


def _granted(account: str) -> list[Step]:
    """What the files grant ``account``: each rule of each role bound to it, where it is
    bound (a ClusterRoleBinding: everywhere; a RoleBinding: its namespace)."""
    steps: list[Step] = []
    for binding in DOCS:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        subjects = binding.get("subjects", [])
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == HOME
            for s in subjects
        ):
            continue
        where = binding["metadata"].get("namespace", EVERYWHERE)
        ref = binding["roleRef"]
        role = _role(ref["kind"], ref["name"], None if ref["kind"] == "ClusterRole" else where)
        steps += _steps(role, where)
    return steps


def _opt_in_roles() -> list[str]:
    """ClusterRoles the files define for a function but bind nowhere (a namespace's owner
    binds them, as the files' comments show)."""
    bound = {
        d["roleRef"]["name"]
        for d in DOCS
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and d["roleRef"]["kind"] == "ClusterRole"
    }
    return sorted(
        d["metadata"]["name"]
        for d in DOCS
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] not in bound
    )


# --- the cluster and the two ways of asking -----------------------------------------------


def _namespace(kube: KubeApiServer) -> str:
    from kubernetes import client

    name = f"rbac-{uuid.uuid4().hex[:8]}"
    with kube.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
    return name  # namespaces stay Terminating without a controller-manager: leave them


@dataclass(frozen=True)
class Cluster:
    kube: KubeApiServer
    namespace: str  # a namespace of Models, made for this module


@pytest.fixture(scope="module")
def cluster(kube_apiserver: KubeApiServer) -> Cluster:
    """infra/k8s/crds (each served) and infra/k8s/rbac applied, as the admin."""
    for crd in sorted((K8S / "crds").glob("*.yaml")):
        plural = yaml.safe_load(crd.read_text())["spec"]["names"]["plural"]
        kube_apiserver.install_crd(crd, plural)
    kube_apiserver.apply(K8S / "rbac")
    return Cluster(kube_apiserver, _namespace(kube_apiserver))


def _review(kube: KubeApiServer, token: str, step: Step, namespace: str) -> bool:
    """A SelfSubjectAccessReview: what the authorizer answers for this identity."""
    from kubernetes import client

    resource, _, subresource = step.resource.partition("/")
    attributes = client.V1ResourceAttributes(
        group=step.group,
        resource=resource,
        subresource=subresource or None,
        verb=step.verb,
        namespace=namespace or None,
        name=step.name or None,
    )
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
    )
    with kube.api_client(token=token) as api:
        answer = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(answer.status.allowed)


_METHODS = {
    "get": "GET",
    "list": "GET",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
}


def _request(kube: KubeApiServer, token: str, step: Step, namespace: str) -> tuple[int, str]:
    """Send ``step`` as the identity would, on an object that does not exist; writes are
    dry runs. Returns the status and body (403: denied; anything else got past RBAC)."""
    resource, _, subresource = step.resource.partition("/")
    base = f"/apis/{step.group}/{VERSIONS[step.group]}" if step.group else "/api/v1"
    scoped = resource not in CLUSTER_SCOPED and (namespace or step.verb != "list")
    path = f"{base}/namespaces/{namespace}/{resource}" if scoped else f"{base}/{resource}"
    if step.verb not in ("list", "create"):
        path += f"/{step.name or 'absent-' + uuid.uuid4().hex[:6]}"
        path += f"/{subresource}" if subresource else ""
    method = _METHODS[step.verb]
    body = b"{}" if method in ("POST", "PUT", "PATCH") else None
    query = "" if method == "GET" else "?dryRun=All"
    request = urllib.request.Request(kube.url + path + query, data=body, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if body:
        kind = "merge-patch+json" if method == "PATCH" else "json"
        request.add_header("Content-Type", f"application/{kind}")
    context = ssl.create_default_context(cafile=str(kube.ca_file))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _where(cluster: Cluster, step: Step, namespace: str | None = None) -> str:
    chosen = namespace if namespace is not None else step.namespace
    return cluster.namespace if chosen is FRESH else chosen


def assert_allowed(cluster: Cluster, token: str, step: Step, namespace: str | None = None) -> None:
    where = _where(cluster, step, namespace)
    assert _review(cluster.kube, token, step, where), f"review denies: {step}"
    if step.verb in _METHODS and step.group in VERSIONS:  # watch: the review alone
        # a named request in "all namespaces" goes to one namespace the grant covers
        target = where or (cluster.namespace if step.verb != "list" else "")
        status, body = _request(cluster.kube, token, step, target)
        assert status not in (401, 403), f"{step}: {status} {body[:300]}"


def assert_denied(
    cluster: Cluster, token: str, account: str, step: Step, namespace: str | None = None
) -> None:
    where = _where(cluster, step, namespace)
    assert not _review(cluster.kube, token, step, where), f"{account} may {step}"
    if step.verb in _METHODS and step.group in VERSIONS:
        target = where or (cluster.namespace if step.verb != "list" else "")
        status, body = _request(cluster.kube, token, step, target)
        assert status == 403, f"{account}: {step} answered {status}, not 403"
        assert f"system:serviceaccount:{HOME}:{account}" in json.loads(body)["message"]


def _until(check: Any, timeout: float = 20.0) -> None:
    """Retry while the RBAC authorizer's caches catch up with the bindings just made."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# --- the tests ------------------------------------------------------------------------------


def test_every_identity_declares_its_boundary() -> None:
    """BEYOND names no identity the files and the catalog do not have."""
    assert set(BEYOND) <= set(_accounts()), set(BEYOND) - set(_accounts())


@pytest.mark.parametrize("account", _accounts())
def test_each_identity_may_do_what_its_role_is_for_and_no_more(
    cluster: Cluster, account: str
) -> None:
    if account not in BEYOND:
        pytest.fail(
            f"{account} has no entry in BEYOND (tests/integration/test_rbac_per_function.py): "
            "declare the steps just beyond its role that it must be denied"
        )
    assert any(d["kind"] == "ServiceAccount" and d["metadata"]["name"] == account for d in DOCS), (
        f"infra/k8s/rbac has no ServiceAccount {account} in {HOME}"
    )
    granted = _granted(account)
    token = cluster.kube.token_for(account, HOME)
    for step in granted:  # (retried: a binding made just now takes a moment to count)
        _until(lambda step=step: assert_allowed(cluster, token, step))
    for step in BEYOND[account]:
        assert step not in granted, f"BEYOND[{account!r}] lists {step}, which its role grants"
        assert_denied(cluster, token, account, step)


@pytest.mark.parametrize("role", _opt_in_roles())
def test_an_opt_in_role_grants_only_where_a_namespace_binds_it(cluster: Cluster, role: str) -> None:
    from kubernetes import client

    (definition,) = [
        d for d in DOCS if d["kind"] == "ClusterRole" and d["metadata"]["name"] == role
    ]
    function = definition["metadata"]["labels"]["modelhooks.dev/function"]
    account = f"modelhooks-{function}"
    opted, other = _namespace(cluster.kube), _namespace(cluster.kube)
    binding = client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name=role, namespace=opted),
        role_ref=client.V1RoleRef(
            api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role
        ),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=account, namespace=HOME)],
    )
    with cluster.kube.api_client() as api:
        client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(opted, binding)
    token = cluster.kube.token_for(account, HOME)
    steps = _steps(definition, opted)
    assert steps, f"{role} grants nothing"
    for step in steps:
        _until(lambda step=step: assert_allowed(cluster, token, step))
        assert_denied(cluster, token, account, step, other)
        assert_denied(cluster, token, account, step, EVERYWHERE)
