"""`KubernetesModelRegistry` on the REAL kube-apiserver with infra/k8s/crds applied: the same
contract as every backend, the register-order property (permutations, duplicates, threads),
and what only this backend has: conditional writes (a stale read loses, never overwrites),
CEL refusing to mutate a registered version, `kubectl get` showing the registry, and
namespaces as the tenancy (a model's records in its owning namespace, RBAC there)."""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.adapters.model_registry.kubernetes import (
    GROUP,
    MODEL_LABEL,
    MODELS,
    REGISTRY_LABEL,
    VERSION,
    KubernetesModelRegistry,
    StaleWrite,
    object_name,
)
from modelhooks.bootstrap import model_registry
from modelhooks.core.errors import BadRequest, Conflict, Forbidden
from modelhooks.core.records import ArtifactState, ModelArtifact, ModelState
from modelhooks.core.settings import load_settings
from modelhooks.handlers.register import KEPT_UIDS
from tests.contract.model_registry import ModelRegistryContract, unique
from tests.contract.register_crash import killed_and_redelivered, state, time_ordered_state
from tests.contract.register_order import (
    Scenario,
    apply_all,
    expected,
    scenarios,
    snapshot,
)
from tests.contract.register_recreated import (
    Recreated,
    deliver,
    kept_uids,
    recreations,
    recreations_killed_and_redelivered,
)
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.integration

CRDS = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "crds"
NAMES = ("registeredmodels.modelhooks.dev", "modelversions.modelhooks.dev")


def _wait(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(kube_apiserver: KubeApiServer) -> Iterator[tuple[Any, str]]:
    """An admin client with the registry's CRDs served, and a namespace for the registry."""
    from kubernetes import client

    kube_apiserver.install_crd(CRDS / "registeredmodel.yaml", "registeredmodels")
    kube_apiserver.install_crd(CRDS / "modelversion.yaml", "modelversions")
    with kube_apiserver.api_client() as api:
        namespace = f"registry-{uuid.uuid4().hex[:8]}"
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
        yield api, namespace


@pytest.fixture(scope="module")
def kubeconfig(kube_apiserver: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kube_apiserver.write_kubeconfig(tmp_path_factory.mktemp("registry") / "kubeconfig")


@pytest.fixture
def kube(cluster: tuple[Any, str], kubeconfig: Path) -> Iterator[KubernetesModelRegistry]:
    """Built the way `registry.backend=kubernetes` builds it (through the kubeconfig)."""
    _, namespace = cluster
    env = {
        "MODELHOOKS_REGISTRY_BACKEND": "kubernetes",
        "MODELHOOKS_REGISTRY_KUBECONFIG": str(kubeconfig),
        "MODELHOOKS_REGISTRY_NAMESPACE": namespace,
    }
    registry = model_registry(load_settings(env=env))
    assert isinstance(registry, KubernetesModelRegistry)
    yield registry
    registry.close()


class TestKubernetes(ModelRegistryContract):
    keeps_types = False  # spec.customProperties is a map of strings

    @pytest.fixture
    def registry(self, kube: KubernetesModelRegistry) -> KubernetesModelRegistry:
        return kube


def _custom(cluster: tuple[Any, str]) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(cluster[0])


def test_records_are_resources_named_from_their_identity(
    kube: KubernetesModelRegistry, cluster: tuple[Any, str]
) -> None:
    name = f"team/{unique('BERT')}:base"  # not a DNS name: the real name stays in spec
    model = kube.create_model(name, properties={"team": "a"})
    version = kube.create_version(model.id, "v1.0+build", properties={})
    assert model.id == object_name(name) and version.id == object_name(model.id, "v1.0+build")
    custom, namespace = _custom(cluster), cluster[1]
    raw = custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, "modelversions", version.id
    )
    assert raw["metadata"]["labels"][MODEL_LABEL] == model.id
    assert raw["metadata"]["labels"][REGISTRY_LABEL] == namespace  # no owner: shared
    assert raw["spec"]["registeredModelRef"] == {"name": model.id}
    assert raw["spec"]["modelName"] == name and raw["spec"]["name"] == "v1.0+build"
    assert kube.get_model(name) == model
    assert kube.get_version(model.id, "v1.0+build") == version


def test_a_write_based_on_a_stale_read_loses(
    kube: KubernetesModelRegistry, kubeconfig: Path, cluster: tuple[Any, str]
) -> None:
    name = unique("m")
    kube.create_model(name, properties={})
    other = KubernetesModelRegistry(namespace=cluster[1], kubeconfig=str(kubeconfig))
    try:
        with kube.transaction():
            mine = kube.get_model(name)
            theirs = other.get_model(name)
            assert mine is not None and theirs is not None
            other.update_model(msgspec.structs.replace(theirs, custom_properties={"by": "other"}))
            with pytest.raises(StaleWrite):
                kube.update_model(msgspec.structs.replace(mine, custom_properties={"by": "me"}))
        got = kube.get_model(name)
        assert got is not None and got.custom_properties == {"by": "other"}  # not overwritten
        kube.update_model(msgspec.structs.replace(got, state=ModelState.ARCHIVED))  # fresh read
    finally:
        other.close()


class ListCounting(KubernetesModelRegistry):
    lists = 0

    def _list(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        self.lists += 1
        return super()._list(*args, **kwargs)


def test_a_transaction_ends_on_what_it_read_as_it_is_then(
    kubeconfig: Path, cluster: tuple[Any, str]
) -> None:
    """A new model and version cost one cluster-wide list (the find): the create does not look
    again, the version takes the model its transaction holds, the closing check reads by
    name. A change to that model meanwhile still ends the transaction in StaleWrite."""
    kube = ListCounting(namespace=cluster[1], kubeconfig=str(kubeconfig))
    other = KubernetesModelRegistry(namespace=cluster[1], kubeconfig=str(kubeconfig))
    try:
        name = unique("m")
        with kube.transaction():
            assert kube.get_model(name) is None
            model = kube.create_model(name, properties={})
            kube.create_version(model.id, "1", properties={})
        assert kube.lists == 1
        with pytest.raises(StaleWrite), kube.transaction():
            model = kube.get_model(name)
            assert model is not None
            theirs = other.get_model(name)
            assert theirs is not None
            other.update_model(msgspec.structs.replace(theirs, state=ModelState.ARCHIVED))
            kube.create_version(model.id, "2", properties={})  # on the model it holds
        with kube.transaction():  # unchanged since: the check passes
            model = kube.get_model(name)
            assert model is not None and model.state == ModelState.ARCHIVED
            kube.create_version(model.id, "3", properties={})
    finally:
        other.close()
        kube.close()


class RequestCounting(KubernetesModelRegistry):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requests: list[str] = []

    def _request(self, method: str, url_path: str, query: Any, body: Any) -> dict[str, Any]:
        cached = " (cache)" if (query or {}).get("resourceVersion") == "0" else ""
        where = url_path.removeprefix(f"/apis/{GROUP}/{VERSION}/")
        self.requests.append(f"{method} {where}{cached}")
        return super()._request(method, url_path, query, body)


def test_a_new_models_version_and_artifact_are_one_write(
    kubeconfig: Path, cluster: tuple[Any, str]
) -> None:
    """A push of a new model: find, then, as the transaction ends, create its version WITH
    its artifact (not created and then updated) and then the model (whoever finds the model
    finds its version; the model's create is the closing check: no read of it again)."""
    kube = RequestCounting(namespace=cluster[1], kubeconfig=str(kubeconfig))
    try:
        name = unique("m")
        with kube.transaction():
            assert kube.get_model(name) is None
            model = kube.create_model(name, properties={})
            version = kube.create_version(model.id, "1", properties={"digest": "d1"})
            kube.upsert_artifact(
                ModelArtifact(id="", version_id=version.id, name="model", uri="u", digest="d1")
            )
        ns = f"namespaces/{cluster[1]}"
        assert kube.requests == [
            "GET registeredmodels (cache)",  # the find: a cluster-wide list, no wait
            f"POST {ns}/modelversions",  # no PUT of the version for its artifact
            f"POST {ns}/registeredmodels",
        ]
        (artifact,) = kube.list_artifacts(version.id)
        assert (artifact.name, artifact.uri, artifact.digest) == ("model", "u", "d1")
        with kube.transaction():  # a version read inside the transaction is created first
            kube.create_version(model.id, "2", properties={})  # a model found: created at once
        with kube.transaction():
            model2 = kube.create_model(unique("m"), properties={})
            held = kube.create_version(model2.id, "1", properties={})
            assert [v.id for v in kube.list_versions(model2.id)] == [held.id]
    finally:
        kube.close()


class CacheBehind(KubernetesModelRegistry):
    """A watch cache that does not show anything yet (it lags etcd; here, always)."""

    def _list(self, *args: Any, cached: bool = False, **kwargs: Any) -> list[dict[str, Any]]:
        found = super()._list(*args, cached=cached, **kwargs)
        return [] if cached else found


def test_a_decision_on_what_the_watch_cache_did_not_show_yet_is_redone(
    kubeconfig: Path, cluster: tuple[Any, str]
) -> None:
    """Not found in the cache, not created, but there: StaleWrite as the transaction ends,
    and instead of a permanent error the transaction raised on it; a look again is fresh."""
    behind = CacheBehind(namespace=cluster[1], kubeconfig=str(kubeconfig))
    other = KubernetesModelRegistry(namespace=cluster[1], kubeconfig=str(kubeconfig))
    try:
        name = unique("m")
        model = other.create_model(name, properties={})
        with pytest.raises(StaleWrite, match="was created while"), behind.transaction():
            assert behind.get_model(name) is None
        with pytest.raises(StaleWrite, match="was created while"), behind.transaction():
            assert behind.get_version(model.id, "1") is None
            other.create_version(model.id, "1", properties={})
            raise Conflict("a decision on the version's absence")
        with behind.transaction():  # a look again in one transaction reads fresh
            assert behind.get_model(name) is None
            assert behind.get_model(name) == model
        with behind.transaction():  # nothing there: no StaleWrite
            assert behind.get_model(unique("m")) is None
    finally:
        other.close()
        behind.close()


def _lost_push(kube: KubernetesModelRegistry, name: str, race: Callable[[], object]) -> None:
    """A new model's push (version "1" and its artifact) whose transaction `race` overtakes
    past the model's absence: it ends in StaleWrite."""
    with pytest.raises(StaleWrite, match="created by another delivery"), kube.transaction():
        model = kube.create_model(name, properties={"by": "me"})
        race()
        version = kube.create_version(model.id, "1", properties={"by": "me"})
        kube.upsert_artifact(
            ModelArtifact(id="", version_id=version.id, name="model", uri="u", digest="d")
        )


def test_a_held_back_version_another_delivery_created_meanwhile_ends_in_stale_write(
    kube: KubernetesModelRegistry, kubeconfig: Path, cluster: tuple[Any, str]
) -> None:
    other = KubernetesModelRegistry(namespace=cluster[1], kubeconfig=str(kubeconfig))
    try:
        name = unique("m")

        def race() -> None:
            theirs = other.create_model(name, properties={})
            other.create_version(theirs.id, "1", properties={"by": "other"})

        _lost_push(kube, name, race)
        with kube.transaction():  # the redelivery: the model is found, the version exists
            found = kube.get_model(name)
            assert found is not None
            with pytest.raises(Conflict):
                kube.create_version(found.id, "1", properties={"by": "me"})
            again = kube.get_version(found.id, "1")
            assert again is not None and again.custom_properties == {"by": "other"}
            assert kube.list_artifacts(again.id) == []  # nothing of the lost write stayed
    finally:
        other.close()


def test_a_held_back_model_another_delivery_created_meanwhile_ends_in_stale_write(
    kube: KubernetesModelRegistry, kubeconfig: Path, cluster: tuple[Any, str]
) -> None:
    """The version, created first, stays: the redelivery finds it with the model."""
    other = KubernetesModelRegistry(namespace=cluster[1], kubeconfig=str(kubeconfig))
    try:
        name = unique("m")
        _lost_push(kube, name, lambda: other.create_model(name, properties={"by": "other"}))
        with kube.transaction():  # the redelivery: the model and the version are found
            found = kube.get_model(name)
            assert found is not None and found.custom_properties == {"by": "other"}
            again = kube.get_version(found.id, "1")
            assert again is not None and again.custom_properties == {"by": "me"}
            assert [a.digest for a in kube.list_artifacts(again.id)] == ["d"]
    finally:
        other.close()


def test_a_version_left_by_a_crash_before_its_models_create_does_not_block_the_redelivery(
    kube: KubernetesModelRegistry, kubeconfig: Path, cluster: tuple[Any, str]
) -> None:
    """A new model's version is created before the model: a crash between the two leaves
    the version alone. The redelivery's version create is refused; it still creates the
    model, so the one after finds both (and is not refused forever)."""
    name = unique("m")
    with kube.transaction():
        model = kube.create_model(name, properties={"by": "crashed"})
        kube.create_version(model.id, "1", properties={"by": "crashed"})
    _custom(cluster).delete_namespaced_custom_object(  # the state a crash there leaves
        GROUP, VERSION, cluster[1], MODELS, model.id
    )
    redelivered = KubernetesModelRegistry(namespace=cluster[1], kubeconfig=str(kubeconfig))
    try:
        with pytest.raises(StaleWrite), redelivered.transaction():
            assert redelivered.get_model(name) is None
            again = redelivered.create_model(name, properties={"by": "redelivery"})
            redelivered.create_version(again.id, "1", properties={"by": "redelivery"})
        with redelivered.transaction():  # the next redelivery finds both
            found = redelivered.get_model(name)
            assert found is not None and found.custom_properties == {"by": "redelivery"}
            kept = redelivered.get_version(found.id, "1")
            assert kept is not None and kept.custom_properties == {"by": "crashed"}
    finally:
        redelivered.close()


def test_artifacts_live_in_their_version_and_keep_versions_fields(
    kube: KubernetesModelRegistry,
) -> None:
    model = kube.create_model(unique("m"), properties={})
    version = kube.create_version(model.id, "1", properties={"digest": "d1"})
    artifact = kube.upsert_artifact(
        ModelArtifact(id="", version_id=version.id, name="model", uri="s3://b/m/1/", digest="d1")
    )
    assert artifact.id == f"{version.id}/model"
    kube.update_version(msgspec.structs.replace(version, state=ModelState.ARCHIVED))
    (listed,) = kube.list_artifacts(version.id)
    assert listed == artifact  # updating the version kept its artifacts
    kube.upsert_artifact(msgspec.structs.replace(artifact, state=ArtifactState.DELETED))
    got = kube.get_version(model.id, "1")
    assert got is not None and got.state == ModelState.ARCHIVED  # and the reverse


def test_cel_refuses_to_mutate_a_registered_version(
    kube: KubernetesModelRegistry, cluster: tuple[Any, str]
) -> None:
    from kubernetes import client

    model = kube.create_model(unique("m"), properties={})
    version = kube.create_version(model.id, "1", properties={})
    artifact = kube.upsert_artifact(
        ModelArtifact(id="", version_id=version.id, name="model", uri="u", digest="sha256:aa")
    )
    custom, namespace = _custom(cluster), cluster[1]
    for patch, message in (
        ({"spec": {"name": "2"}}, "spec.name is immutable: a version's name is its identity"),
        (
            {"spec": {"registeredModelRef": {"name": "other"}}},
            "spec.registeredModelRef is immutable",
        ),
        ({"spec": {"modelName": "other"}}, "spec.modelName is immutable"),
        ({"spec": {"artifacts": []}}, "an artifact cannot be removed from a registered version"),
    ):
        with pytest.raises(client.ApiException) as refused:
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "modelversions", version.id, patch
            )
        assert refused.value.status == 422, patch
        assert message in refused.value.body, refused.value.body
    with pytest.raises(client.ApiException) as renamed:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "registeredmodels", model.id, {"spec": {"name": "x"}}
        )
    assert renamed.value.status == 422 and "spec.name is immutable" in renamed.value.body
    # through the adapter: the server's message, as a permanent BadRequest
    with pytest.raises(BadRequest, match="an artifact's digest is immutable once set"):
        kube.upsert_artifact(msgspec.structs.replace(artifact, digest="sha256:bb"))
    (stored,) = kube.list_artifacts(version.id)
    assert stored.digest == "sha256:aa"


def test_kubectl_get_shows_the_registry(
    kube: KubernetesModelRegistry, kube_apiserver: KubeApiServer, cluster: tuple[Any, str]
) -> None:
    model = kube.create_model(unique("shown"), properties={})
    version = kube.create_version(model.id, "7", properties={})
    kube.upsert_artifact(
        ModelArtifact(id="", version_id=version.id, name="model", uri="u", digest="sha256:cc")
    )

    def table(plural: str) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{kube_apiserver.url}/apis/{GROUP}/{VERSION}/namespaces/{cluster[1]}/{plural}",
            headers={
                "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io",  # kubectl get's
                "Authorization": f"Bearer {kube_apiserver.admin_token}",
            },
        )
        context = ssl.create_default_context(cafile=str(kube_apiserver.ca_file))
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return dict(json.loads(response.read()))

    models = table("registeredmodels")
    assert [c["name"] for c in models["columnDefinitions"] if c["priority"] == 0] == [
        "Name",
        "Model",
        "State",
        "Age",
    ]
    (row,) = [r for r in models["rows"] if r["cells"][0] == model.id]
    assert row["cells"][1:3] == [model.name, "LIVE"]
    versions = table("modelversions")
    assert [c["name"] for c in versions["columnDefinitions"] if c["priority"] == 0] == [
        "Name",
        "Model",
        "Version",
        "State",
        "Digest",
        "Age",
    ]
    (row,) = [r for r in versions["rows"] if r["cells"][0] == version.id]
    assert row["cells"][1:5] == [model.name, "7", "LIVE", "sha256:cc"]


def test_a_taken_name_is_a_conflict_even_across_clients(
    kube: KubernetesModelRegistry, kubeconfig: Path, cluster: tuple[Any, str]
) -> None:
    name = unique("m")
    other = KubernetesModelRegistry(namespace=cluster[1], kubeconfig=str(kubeconfig))
    try:
        other.create_model(name, properties={})
        with pytest.raises(Conflict):
            kube.create_model(name, properties={})
    finally:
        other.close()


# --- the register-order contract ---------------------------------------------------------

SLOW = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@SLOW
@given(scenario=scenarios(max_events=16), data=st.data())
def test_any_order_ends_in_the_time_ordered_state(
    kube: KubernetesModelRegistry, scenario: Scenario, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(scenario.events), label="order")
    apply_all(kube, order)
    assert snapshot(kube, scenario.names()) == expected(scenario)


@SLOW
@given(scenario=scenarios(max_events=16), data=st.data())
def test_concurrent_interleavings_end_in_the_time_ordered_state(
    cluster: tuple[Any, str], kubeconfig: Path, scenario: Scenario, data: st.DataObject
) -> None:
    """Four threads; no lock in the adapter: only the conditional writes keep it right."""
    order = data.draw(st.permutations(scenario.events), label="order")
    registry = KubernetesModelRegistry(namespace=cluster[1], kubeconfig=str(kubeconfig))
    try:
        apply_all(registry, order, workers=4)
        assert snapshot(registry, scenario.names()) == expected(scenario)
    finally:
        registry.close()


@settings(SLOW, max_examples=30)
@given(scenario=scenarios(max_events=12), data=st.data())
def test_a_delivery_killed_between_its_writes_and_delivered_again_ends_as_never_killed(
    kube: KubernetesModelRegistry, scenario: Scenario, data: st.DataObject
) -> None:
    """Optimistic, not atomic: a delivery killed after its version's create, before its
    model's, or between a deletion's writes leaves them; its redelivery completes it
    (tests/contract/register_crash.py)."""
    kills = killed_and_redelivered(kube, scenario, data.draw)
    assert state(kube, scenario.names()) == time_ordered_state(scenario), kills


@SLOW
@given(scenario=recreations(), data=st.data())
def test_a_recreated_models_version_stays_whatever_the_order_and_times_of_deliveries(
    kube: KubernetesModelRegistry, scenario: Recreated, data: st.DataObject
) -> None:
    """A deletion sent again late names its Model's uid: it archives only what that uid
    registered (tests/contract/register_recreated.py)."""
    order = data.draw(st.permutations(scenario.events), label="order")
    for event in order:
        deliver(kube, event)
    assert snapshot(kube, {scenario.name}) == scenario.expected()
    assert kept_uids(kube, scenario.name) <= KEPT_UIDS


@settings(SLOW, max_examples=20)
@given(scenario=recreations(), data=st.data())
def test_a_recreated_models_delivery_killed_between_its_writes_ends_as_applied_once(
    kube: KubernetesModelRegistry, scenario: Recreated, data: st.DataObject
) -> None:
    """Models of one name created, deleted, created again, deletions sent again late, each
    delivery maybe killed after any prefix of its resource writes and delivered again: the
    states and uid facts of each delivery applied once (tests/contract/register_recreated.py)."""
    recreations_killed_and_redelivered(kube, scenario, data.draw)


# --- RBAC: infra/k8s/rbac/registry.yaml ---------------------------------------------------


def test_writers_write_the_registry_and_readers_only_read_it(
    kube_apiserver: KubeApiServer, cluster: tuple[Any, str]
) -> None:
    rbac = CRDS.parent / "rbac"
    files = ("00-namespace.yaml", "register.yaml", "cleanup.yaml", "registry.yaml")
    kube_apiserver.apply(*(rbac / path for path in files))
    name = unique("rbac")
    with (
        kube_apiserver.api_client(
            kube_apiserver.token_for("modelhooks-register", "modelhooks")
        ) as w,
        kube_apiserver.api_client(
            kube_apiserver.token_for("modelhooks-cleanup", "modelhooks")
        ) as r,
    ):
        writer = KubernetesModelRegistry(namespace="modelhooks", api_client=w)
        reader = KubernetesModelRegistry(namespace="modelhooks", api_client=r)

        def register() -> None:
            model = writer.get_model(name) or writer.create_model(name, properties={})
            if writer.get_version(model.id, "1") is None:
                writer.create_version(model.id, "1", properties={})

        _wait(register)  # until the RoleBinding is effective
        model = reader.get_model(name)
        assert model is not None and [v.name for v in reader.list_versions(model.id)] == ["1"]
        with pytest.raises(Forbidden, match="grant this identity"):
            reader.create_model(unique("rbac"), properties={})
        with pytest.raises(Forbidden, match=repr(cluster[1])):  # writes only where bound
            writer.create_model(unique("rbac"), properties={"namespace": cluster[1]})


def _namespace(api: Any, prefix: str) -> str:
    from kubernetes import client

    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
    )
    return namespace


def test_each_model_lives_in_its_owning_namespace_and_rbac_there_is_the_tenancy(
    kube: KubernetesModelRegistry, kube_apiserver: KubeApiServer, cluster: tuple[Any, str]
) -> None:
    from kubernetes import client

    api, shared = cluster
    team_a, team_b = _namespace(api, "team-a"), _namespace(api, "team-b")
    a = kube.create_model(unique("a"), properties={"namespace": team_a})
    b = kube.create_model(unique("b"), properties={"namespace": team_b})
    untenanted = kube.create_model(unique("shared"), properties={})
    a1 = kube.create_version(a.id, "1", properties={})
    kube.create_version(b.id, "1", properties={})
    custom = _custom(cluster)

    def names(namespace: str, plural: str, api_client: Any = None) -> set[str]:
        lister = client.CustomObjectsApi(api_client) if api_client else custom
        items = lister.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]
        return {o["metadata"]["name"] for o in items}

    assert a.id in names(team_a, "registeredmodels") and a1.id in names(team_a, "modelversions")
    assert b.id in names(team_b, "registeredmodels")
    assert untenanted.id in names(shared, "registeredmodels")
    assert not {a.id, b.id} & names(shared, "registeredmodels")
    # found by name across namespaces; a name stays one model across them
    assert kube.get_model(a.name) == a and kube.get_version(a.id, "1") == a1
    assert [v.id for v in kube.list_versions(a.id)] == [a1.id]
    with pytest.raises(Conflict, match=team_a):
        kube.create_model(a.name, properties={"namespace": team_b})
    # a team's own Role in its namespace: its records, not another team's
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(
        team_a, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    rule = client.V1PolicyRule(
        api_groups=[GROUP], resources=["registeredmodels", "modelversions"], verbs=["get", "list"]
    )
    rbac.create_namespaced_role(
        team_a, client.V1Role(metadata=client.V1ObjectMeta(name="registry-reader"), rules=[rule])
    )
    binding = {
        "metadata": {"name": "registry-reader"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "registry-reader",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": team_a}],
    }
    rbac.create_namespaced_role_binding(team_a, binding)
    with kube_apiserver.api_client(kube_apiserver.token_for("reader", team_a)) as mine:
        _wait(lambda: names(team_a, "registeredmodels", mine))  # until the binding is effective
        assert a.id in names(team_a, "registeredmodels", mine)
        assert a1.id in names(team_a, "modelversions", mine)
        for plural in ("registeredmodels", "modelversions"):
            with pytest.raises(client.ApiException) as refused:
                names(team_b, plural, mine)
            assert refused.value.status == 403


# --- export | import between SQLite and Kubernetes ----------------------------------------


def test_a_registry_moves_between_sqlite_and_kubernetes(
    kubeconfig: Path, kube_apiserver: KubeApiServer, tmp_path: Path
) -> None:
    from kubernetes import client

    from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
    from modelhooks.core.registry_copy import export_registry, import_registry, source_id_key
    from tests.unit.test_registry_copy import populate, without_ids

    with kube_apiserver.api_client() as api:  # a fresh registry: the export is all of it
        namespace = f"moved-{uuid.uuid4().hex[:8]}"
        for name in (namespace, "ml"):  # populate's team/bert is namespace ml's
            try:
                client.CoreV1Api(api).create_namespace(
                    client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
                )
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
    sqlite = SqliteModelRegistry(tmp_path / "registry.db")
    populate(sqlite)
    exported = export_registry(sqlite)
    kube = KubernetesModelRegistry(namespace=namespace, kubeconfig=str(kubeconfig))
    try:
        first = import_registry(kube, exported)
        assert (first.created, first.refused) == (6, [])
        again = import_registry(kube, exported)
        assert (again.created, again.updated, again.refused) == (0, 0, [])
        moved = export_registry(kube)
        assert without_ids(moved) == without_ids(exported)
        bert = kube.get_model("team/bert")
        assert bert is not None
        assert bert.custom_properties[source_id_key("sqlite")] == sqlite.get_model("team/bert").id  # type: ignore[union-attr]
        back = SqliteModelRegistry(tmp_path / "back.db")  # and back: both old ids kept
        import_registry(back, moved)
        returned = back.get_model("team/bert")
        assert returned is not None
        assert returned.custom_properties[source_id_key("kubernetes")] == bert.id
        assert (
            returned.custom_properties[source_id_key("sqlite")]
            == bert.custom_properties[source_id_key("sqlite")]
        )
    finally:
        kube.close()


def test_a_deletion_in_a_namespace_being_deleted_records_what_it_can(
    cluster: tuple[Any, str], kube: KubernetesModelRegistry
) -> None:
    """A namespace deleted with its Models: the API server creates nothing in it any more
    (403 NamespaceTerminating), and register recorded the deletion of a Model it had not
    registered by creating its model there: a 403 blaming its RBAC, dead-lettered for each
    such Model. The records of a namespace being deleted go with it: nothing to record (a
    Skip); a model registered there before is archived as ever (an update)."""
    from datetime import UTC, datetime

    from kubernetes import client

    from modelhooks.core.function import Skip
    from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
    from modelhooks.handlers.register import archive_model, register_model

    api, _ = cluster
    team = f"team-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": team}})
    known, unknown = unique("known"), unique("unknown")
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    pushed = ArtifactPushed(
        model=known, version="1", uri="oci://r.example/m@sha256:" + "a" * 64,
        digest="sha256:" + "a" * 64, store="oci", namespace=team,
    )  # fmt: skip
    register_model(
        CanonicalEvent(id="p", source="t", type=pushed.TYPE, data=pushed, time=t0),
        pushed,
        registry=kube,
    )
    client.CoreV1Api(api).delete_namespace(team)
    later = datetime(2026, 11, 2, tzinfo=UTC)
    for name in (known, unknown):
        deleted = ModelDeleted(name=name, namespace=team, version="1")
        event = CanonicalEvent(id=name, source="t", type=deleted.TYPE, data=deleted, time=later)
        if name == unknown:
            with pytest.raises(Skip, match="being deleted"):
                archive_model(event, deleted, registry=kube)
        else:
            archive_model(event, deleted, registry=kube)
    found = kube.get_model(known)
    assert found is not None and found.state == ModelState.ARCHIVED
    assert kube.get_model(unknown) is None
    for name in (known, unknown):  # a push meanwhile (a new version, a new model): nothing
        late = pushed.replace(model=name, version="2")
        event = CanonicalEvent(id=f"{name}-2", source="t", type=late.TYPE, data=late, time=later)
        with pytest.raises(Skip, match="being deleted"):
            register_model(event, late, registry=kube)


def test_a_push_again_in_a_namespace_being_deleted_is_recorded_on_its_version(
    cluster: tuple[Any, str], kube: KubernetesModelRegistry
) -> None:
    """The same bytes pushed again into a namespace being deleted: its version is there, so
    register records the push on it (an update, which the API server still takes). It tried
    to create the version first (a push is mostly of a new one), was refused 403
    NamespaceTerminating and skipped the push unrecorded, and `sign`, waiting until register
    has recorded this very push (its time on the version), answered 503 until the delivery
    was dead-lettered."""
    from datetime import UTC, datetime

    from kubernetes import client

    from modelhooks.core.records import PUSHED_AT, stamp
    from modelhooks.events.model import ArtifactPushed, CanonicalEvent
    from modelhooks.handlers.register import register_model

    api, _ = cluster
    team = f"team-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": team}})
    name = unique("again")
    pushed = ArtifactPushed(
        model=name, version="1", uri="oci://r.example/m@sha256:" + "b" * 64,
        digest="sha256:" + "b" * 64, store="oci", namespace=team,
    )  # fmt: skip
    first = CanonicalEvent(
        id="p1", source="t", type=pushed.TYPE, data=pushed, time=datetime(2026, 11, 1, tzinfo=UTC)
    )
    register_model(first, pushed, registry=kube)
    client.CoreV1Api(api).delete_namespace(team)
    again = CanonicalEvent(
        id="p2", source="t", type=pushed.TYPE, data=pushed, time=datetime(2026, 11, 2, tzinfo=UTC)
    )
    [reply] = register_model(again, pushed, registry=kube)
    model = kube.get_model(name)
    assert model is not None
    version = kube.get_version(model.id, "1")
    assert version is not None and version.custom_properties[PUSHED_AT] == stamp(again)
    assert reply.data.created is False  # type: ignore[union-attr]
