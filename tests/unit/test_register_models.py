"""register on a `Model` (model.created / .updated): the source resolved once into a digest,
then registered exactly as an artifact.pushed of that version, the reply keeping the Model's
subject so notify finds it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from modelhooks.bootstrap import build
from modelhooks.core.content import PREFIX
from modelhooks.core.function import Function, Skip
from modelhooks.core.records import ModelState
from modelhooks.core.settings import load_settings
from modelhooks.events.model import CanonicalEvent, ModelCreated, ModelRegistered, ModelUpdated
from tests.fakes.memory_registry import InMemoryModelRegistry

DIGEST = "sha256:" + "a" * 64
SUBJECT = "/apis/modelhooks.dev/v1alpha1/namespaces/ml/models/bert"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


class Oci:
    """`OciClients` whose one registry knows the tag v1, counting the look-ups."""

    def __init__(self) -> None:
        self.resolved: list[tuple[str, str]] = []

    def registry_for(self, uri: str) -> tuple[Any, str, str]:
        rest = uri.removeprefix("oci://").partition("/")[2]
        repo, _, ref = rest.partition("@") if "@" in rest else rest.rpartition(":")
        return self, repo, ref

    def resolve(self, repo: str, tag: str) -> str | None:
        self.resolved.append((repo, tag))
        return DIGEST if tag == "v1" else None


@pytest.fixture
def world(tmp_path: Path) -> tuple[Function, InMemoryModelRegistry, Oci, Path]:
    registry, oci = InMemoryModelRegistry(), Oci()
    settings = load_settings(env={"MODELHOOKS_HOME": str(tmp_path)})
    app = build(settings, registry=registry, oci=oci)
    return app.function("register"), registry, oci, tmp_path / "store"


def model_event(
    source: dict[str, Any], status: dict[str, Any] | None = None, *, id: str = "c1", **kw: Any
) -> CanonicalEvent:
    kind = kw.pop("kind", ModelCreated)
    data = kind(name="bert", namespace="ml", version="1", spec={"source": source, **kw},
                status=status or {})  # fmt: skip
    return CanonicalEvent(id=id, source="k8s", type=data.TYPE, data=data, subject=SUBJECT, time=T0)


def registered(replies: list[CanonicalEvent]) -> ModelRegistered:
    [reply] = replies
    assert isinstance(reply.data, ModelRegistered) and reply.subject == SUBJECT
    return reply.data


def test_an_oci_tag_is_resolved_once_and_registered_as_a_push_of_the_models_version(
    world: tuple[Function, InMemoryModelRegistry, Oci, Path],
) -> None:
    register, registry, oci, _ = world
    data = registered(register.handle(model_event({"oci": {"reference": "r.example/m/bert:v1"}})))
    assert (data.model, data.version, data.namespace) == ("bert", "1", "ml")
    assert (data.digest, data.uri) == (DIGEST, f"oci://r.example/m/bert@{DIGEST}")
    assert oci.resolved == [("m/bert", "v1")]
    model = registry.get_model("bert")
    assert model is not None and model.state == ModelState.LIVE
    # the status notify wrote: never fetched again, and a redelivery changes nothing
    again = model_event({"oci": {"reference": "r.example/m/bert:v1"}}, {"resolvedDigest": DIGEST},
                        id="u1", kind=ModelUpdated)  # fmt: skip
    assert registered(register.handle(again)).created is False
    assert oci.resolved == [("m/bert", "v1")]


@pytest.mark.parametrize("digest", [DIGEST, "sha512:" + "b" * 128])
def test_a_digest_reference_is_taken_as_written(
    world: tuple[Function, InMemoryModelRegistry, Oci, Path], digest: str
) -> None:
    register, _, oci, _ = world
    data = registered(register.handle(model_event({"oci": {"reference": f"r.example/m@{digest}"}})))
    assert (data.digest, data.uri) == (digest, f"oci://r.example/m@{digest}")
    assert oci.resolved == []


def test_an_absent_tag_or_prefix_registers_nothing_yet(
    world: tuple[Function, InMemoryModelRegistry, Oci, Path],
) -> None:
    register, registry, _, _ = world
    with pytest.raises(Skip, match="not there yet"):
        register.handle(model_event({"oci": {"reference": "r.example/m/bert:v9"}}))
    with pytest.raises(Skip, match="not there yet"):
        register.handle(model_event({"gcs": {"uri": "gs://models/models/bert/1/"}}))
    assert registry.get_model("bert") is None


def test_an_object_store_source_gets_the_content_digest_a_push_would(
    world: tuple[Function, InMemoryModelRegistry, Oci, Path],
) -> None:
    register, _, _, store = world
    prefix = store / "models" / "models" / "bert" / "1"
    prefix.mkdir(parents=True)
    (prefix / "weights.bin").write_bytes(b"w")
    first = registered(register.handle(model_event({"gcs": {"uri": "gs://models/models/bert/1/"}})))
    assert first.digest.startswith(PREFIX)
    (prefix / "_SUCCESS").write_bytes(b"")  # the ready marker is not content
    again = registered(
        register.handle(model_event({"gcs": {"uri": "gs://models/models/bert/1/"}}, id="c2"))
    )
    assert again.digest == first.digest and again.created is False


def test_an_http_source_is_named_by_its_sha256_and_never_fetched(
    world: tuple[Function, InMemoryModelRegistry, Oci, Path],
) -> None:
    register, _, oci, _ = world
    url = "https://models.example.com/bert-1.tar.gz"  # not reachable here: never fetched
    data = registered(register.handle(model_event({"http": {"url": url, "sha256": "b" * 64}})))
    assert (data.uri, data.digest) == (url, "sha256:" + "b" * 64) and oci.resolved == []


def test_an_update_of_a_registered_model_registers_nothing_more(
    world: tuple[Function, InMemoryModelRegistry, Oci, Path],
) -> None:
    register, _, oci, _ = world
    status = {"resolvedDigest": DIGEST, "modelVersionId": "9"}  # notify wrote it
    update = model_event({"oci": {"reference": "r.example/m/bert:v1"}}, status, id="u2",
                         kind=ModelUpdated)  # fmt: skip
    with pytest.raises(Skip, match="registered already"):
        register.handle(update)
    assert oci.resolved == []
