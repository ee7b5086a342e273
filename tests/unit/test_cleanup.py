"""The `cleanup` function on the local store (a real directory) and the in-memory registry:
each policy deletes exactly what it says, never what a live version uses, nothing outside
the namespace's locations; bad input is refused naming why, with nothing deleted; a second
delivery deletes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.bootstrap import build
from modelhooks.core.errors import BadRequest, Forbidden, ModelhooksError
from modelhooks.core.settings import load_settings
from modelhooks.core.tenancy import Tenancy
from modelhooks.delivery.statuses import status_of
from modelhooks.events.model import (
    ArtifactPurged,
    ArtifactPushed,
    CanonicalEvent,
    ModelDeleted,
)
from modelhooks.handlers.register import register_model
from tests.fakes.memory_registry import InMemoryModelRegistry

T0 = datetime(2026, 11, 1, tzinfo=UTC)
FILES = ("weights.bin", "config.json", "_SUCCESS", "model.sig")


class World:
    def __init__(self, home: Path, registry: Any = None, **overrides: Any) -> None:
        self.home, self.root = home, home / "store" / "models"
        self.registry = registry or InMemoryModelRegistry()
        settings = load_settings(env={"MODELHOOKS_HOME": str(home)})
        self.cleanup = build(settings, registry=self.registry, **overrides).function("cleanup")

    def version(self, name: str, version: str, key: str, *, at: datetime = T0) -> str:
        """A model version's files under models/<key>/, registered as pushed at `at`."""
        for file in FILES:
            path = self.root / key / file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(file.encode())
        uri = f"file://{self.root}/{key}/"
        data = ArtifactPushed(
            model=name, version=version, uri=uri, digest=f"local-generation:{key}", store="local"
        )
        event = CanonicalEvent(id=f"p-{key}", source="t", type=data.TYPE, data=data, time=at)
        register_model(event, data, registry=self.registry)
        return uri

    def left(self, key: str) -> list[str]:
        return sorted(p.name for p in (self.root / key).glob("*"))

    def delete(self, name: str, *, at: datetime = T0 + timedelta(days=1), **spec: Any) -> list[Any]:
        data = ModelDeleted(name=name, namespace="ml", spec=spec)
        event = CanonicalEvent(id=f"d-{name}", source="t", type=data.TYPE, data=data, time=at)
        return [r.data for r in self.cleanup.handle(event)]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_delete_takes_every_object_of_the_version_and_nothing_else(world: World) -> None:
    world.version("bert", "1", "bert/1")
    world.version("bert10", "1", "bert/10")  # a string prefix of bert/1's, not a path one
    (reply,) = world.delete("bert", deletionPolicy="Delete")
    assert isinstance(reply, ArtifactPurged) and reply.policy == "Delete"
    assert sorted(reply.deleted) == sorted(f"bert/1/{f}" for f in FILES) and not reply.failed
    assert world.left("bert/1") == [] and world.left("bert/10") == sorted(FILES)
    (again,) = world.delete("bert", deletionPolicy="Delete")  # a redelivery
    assert again.deleted == []


def test_untag_takes_only_the_ready_marker(world: World) -> None:
    world.version("bert", "1", "bert/1")
    (reply,) = world.delete("bert", deletionPolicy="Untag")
    assert reply.deleted == ["bert/1/_SUCCESS"]
    assert world.left("bert/1") == sorted(set(FILES) - {"_SUCCESS"})


def test_retain_is_the_default_and_deletes_nothing(world: World) -> None:
    world.version("bert", "1", "bert/1")
    (reply,) = world.delete("bert")
    assert reply.policy == "Retain" and reply.deleted == []
    assert world.left("bert/1") == sorted(FILES)


def test_what_a_live_version_uses_stays(world: World) -> None:
    world.version("bert", "1", "bert/1")
    world.version("bert-copy", "1", "bert/1")  # another live model, the same location
    world.version("bert", "2", "bert/2")
    world.version("nested", "1", "bert/2/sub")  # a live location inside bert/2
    replies = world.delete("bert", deletionPolicy="Delete")
    assert world.left("bert/1") == sorted(FILES)
    assert world.left("bert/2") == ["sub"] and world.left("bert/2/sub") == sorted(FILES)
    assert {r.uri.rsplit("/models/", 1)[1] for r in replies} == {"bert/1/", "bert/2/"}
    assert [r.deleted for r in replies if r.uri.endswith("bert/1/")] == [[]]
    assert sorted(next(r.deleted for r in replies if r.uri.endswith("bert/2/"))) == sorted(
        f"bert/2/{f}" for f in FILES
    )


def test_a_version_pushed_after_the_deletion_stays(world: World) -> None:
    world.version("bert", "1", "bert/1")
    world.version("bert", "2", "bert/2", at=T0 + timedelta(days=2))  # after the deletion
    (reply,) = world.delete("bert", deletionPolicy="Delete")
    assert reply.uri.endswith("bert/1/") and world.left("bert/2") == sorted(FILES)


def test_the_models_own_source_from_its_spec(world: World) -> None:
    uri = world.version("bert", "1", "bert/1")
    (reply,) = world.delete("bert", deletionPolicy="Delete", source={"gcs": {"uri": uri}})
    assert reply.uri == uri and world.left("bert/1") == []


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"deletionPolicy": "Purge"}, "not one of Retain, Delete, Untag"),
        (
            {"deletionPolicy": "Delete", "source": {"gcs": {"uri": "file:///x/../../etc/"}}},
            "outside",
        ),
        ({"deletionPolicy": "Delete", "source": {"git": {"url": "x"}}}, "spec.source"),
        ({"deletionPolicy": "Delete", "source": {"oci": {"reference": "nohost"}}}, "oci://"),
    ],
)
def test_bad_input_is_refused_and_nothing_goes(
    world: World, spec: dict[str, Any], message: str
) -> None:
    world.version("bert", "1", "bert/1")
    with pytest.raises((BadRequest, Forbidden), match=message):
        world.delete("bert", **spec)
    assert world.left("bert/1") == sorted(FILES)


def test_a_model_with_nothing_known_yet_has_nothing_to_clean(world: World) -> None:
    assert world.delete("ghost", deletionPolicy="Delete") == []


def test_keys_that_could_reach_elsewhere_are_refused(world: World) -> None:
    from modelhooks.core.cleanup import check_prefix

    for key in ("m/../../etc/", "/abs/m/", "m/\x00/", "m\n/", "", "/"):
        with pytest.raises(BadRequest):
            check_prefix(key, "test")
    assert check_prefix("m/1", "test") == "m/1/"


def test_a_location_outside_the_namespace_is_forbidden_naming_it(tmp_path: Path) -> None:
    world = World(tmp_path, tenancy=Tenancy.parse("ml=gs://ml-*"))
    world.version("bert", "1", "bert/1")
    with pytest.raises(Forbidden, match="may not delete file://"):
        world.delete("bert", deletionPolicy="Delete")
    assert world.left("bert/1") == sorted(FILES)


def test_the_cli_prints_the_plan_then_deletes_exactly_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from modelhooks.bootstrap import reset
    from modelhooks.cli import main

    reset()
    settings = load_settings(env={"MODELHOOKS_HOME": str(tmp_path)})
    world = World(tmp_path, registry=build(settings).deps.registry)  # the CLI's (SQLite)
    world.version("bert", "1", "bert/1")
    world.version("bert", "2", "bert/2")
    home = ["--home", str(tmp_path)]
    assert main(["cleanup", "bert/1", "--policy", "Delete", "--dry-run", "--json", *home]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert sorted(r["name"] for r in planned["plan"]) == sorted(f"bert/1/{f}" for f in FILES)
    assert world.left("bert/1") == sorted(FILES)  # a dry run deletes nothing
    assert main(["cleanup", "bert/1", "--policy", "Delete", "--quiet", *home]) == 0
    assert world.left("bert/1") == [] and world.left("bert/2") == sorted(FILES)
    assert main(["cleanup", "bert/9", *home]) == 2  # no such version: nothing to clean up


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=12,
)
sources = st.fixed_dictionaries(
    {},
    optional={
        "gcs": st.fixed_dictionaries({"uri": st.text(max_size=40) | st.sampled_from(
            ["gs://", "s3://b/", "file:///etc/", "gs://b/../x/", "gs://b/m/\x00/", "oci://h/r"])}),
        "oci": st.fixed_dictionaries({"reference": st.text(max_size=40)}) | json_values,
        "s3": json_values,
    },
)  # fmt: skip


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    policy=st.sampled_from(["Delete", "Untag", "Retain"]) | json_values,
    source=sources | json_values,
    status=st.dictionaries(st.sampled_from(["resolvedDigest", "x"]), json_values, max_size=2),
)
def test_hostile_specs_are_refused_with_a_reason_and_delete_nothing(
    world: World, policy: Any, source: Any, status: dict[str, Any]
) -> None:
    world.version("bert", "1", "bert/1")
    data = ModelDeleted(
        name="bert", spec={"deletionPolicy": policy, "source": source}, status=status
    )
    event = CanonicalEvent(
        id="fuzz", source="t", type=data.TYPE, data=data, time=T0 + timedelta(days=1)
    )
    try:
        world.cleanup.handle(event)
    except ModelhooksError as exc:
        assert status_of(exc) < 500, exc  # refused with a reason, never a 5xx
    if policy not in ("Delete", "Untag"):
        assert world.left("bert/1") == sorted(FILES)


def test_no_function_acts_on_a_paused_model(tmp_path: Path) -> None:
    from modelhooks.delivery.runtime import run

    world = World(tmp_path)
    uri = world.version("bert", "1", "bert/1")
    app = build(load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}), registry=world.registry)
    spec = {"deletionPolicy": "Delete", "source": {"gcs": {"uri": uri}}, "paused": True}
    data = ModelDeleted(name="bert", namespace="ml", spec=spec)
    event = CanonicalEvent(id="d1", source="t", type=data.TYPE, data=data, time=T0)
    for name in ("cleanup", "register", "notify", "prune"):
        outcome = run(app.function(name), event, app.delivery)
        assert outcome.status == 204 and outcome.replies == (), name
    assert world.left("bert/1") == sorted(FILES)  # paused: nothing deleted
    resumed = event.replace(id="d2", data=data.replace(spec={**spec, "paused": False}))
    assert run(app.function("cleanup"), resumed, app.delivery).status == 200
    assert world.left("bert/1") == []


def test_an_http_source_is_its_publishers_and_nothing_is_deleted(world: World) -> None:
    source = {"http": {"url": "https://models.example.com/bert.tar.gz", "sha256": "d" * 64}}
    (reply,) = world.delete("bert", deletionPolicy="Delete", source=source)
    assert reply.deleted == [] and reply.kept == [source["http"]["url"]]  # and it answers


def test_retain_reaches_no_store_or_registry(world: World) -> None:
    """Retain deletes nothing, so it checks and contacts nothing: a version on a registry
    host that does not resolve (or a store that is down) is kept, not a 400 or a 503."""
    data = ArtifactPushed(
        model="bert",
        version="2",
        uri="oci://registry.invalid:5000/bert@sha256:" + "a" * 64,
        digest="sha256:" + "a" * 64,
        store="oci",
    )
    event = CanonicalEvent(id="p-oci", source="t", type=data.TYPE, data=data, time=T0)
    register_model(event, data, registry=world.registry)
    (reply,) = world.delete("bert", deletionPolicy="Retain")
    assert isinstance(reply, ArtifactPurged)
    assert (reply.policy, reply.deleted, reply.kept) == ("Retain", [], [data.uri])
