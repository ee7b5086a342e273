"""`modelhooks registry export | import`: a registry moves between backends whole, the old
ids kept as properties, and importing twice changes nothing (SQLite and the in-memory fake
here; the Kubernetes backend in tests/integration/test_kubernetes_registry.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.cli import main
from modelhooks.core.errors import BadRequest
from modelhooks.core.ports import ModelRegistry
from modelhooks.core.records import ArtifactState, ModelArtifact, ModelState, Typed, json_values
from modelhooks.core.registry_copy import export_registry, import_registry, source_id_key
from tests.fakes.memory_registry import InMemoryModelRegistry


def populate(registry: ModelRegistry) -> None:
    bert = registry.create_model("team/bert", properties={"namespace": "ml"})
    registry.update_model(msgspec.structs.replace(bert, description="a model"))
    for name, state in (("1", ModelState.ARCHIVED), ("2", ModelState.LIVE)):
        version = registry.create_version(bert.id, name, properties={"digest": f"d{name}"})
        registry.update_version(msgspec.structs.replace(version, state=state))
        registry.upsert_artifact(
            ModelArtifact(
                id="",
                version_id=version.id,
                name="model",
                uri=f"s3://b/bert/{name}/",
                digest=f"d{name}",
                state=ArtifactState.LIVE,
                custom_properties={"source_event": f"e{name}"},
            )
        )
    registry.create_model("empty", properties={})


def without_ids(doc: dict[str, Any]) -> Any:
    """The export's content, ids and kept-id properties left out."""

    def strip(record: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in record.items() if k not in ("id", "model_id", "version_id")}
        out["custom_properties"] = {
            k: v
            for k, v in record["custom_properties"].items()
            if not k.startswith("modelhooks.id.")
        }
        for child in ("versions", "artifacts"):
            if child in record:
                out[child] = [strip(c) for c in record[child]]
        return out

    return [strip(m) for m in doc["models"]]


def test_a_registry_moves_whole_and_keeps_its_old_ids(tmp_path: Path) -> None:
    source = SqliteModelRegistry(tmp_path / "a.db")
    populate(source)
    exported = export_registry(source)
    target = InMemoryModelRegistry()
    first = import_registry(target, json.loads(json.dumps(exported)))
    assert (first.created, first.refused) == (6, [])  # 2 models, 2 versions, 2 artifacts
    moved = export_registry(target)
    assert without_ids(moved) == without_ids(exported)
    key = source_id_key("sqlite")
    old = {m["name"]: m["id"] for m in exported["models"]}
    assert {m["name"]: m["custom_properties"][key] for m in moved["models"]} == old
    (bert,) = [m for m in moved["models"] if m["name"] == "team/bert"]
    assert [v["artifacts"][0]["custom_properties"][key] for v in bert["versions"]] == [
        a["id"]
        for m in exported["models"]
        if m["name"] == "team/bert"
        for v in m["versions"]
        for a in v["artifacts"]
    ]


def test_importing_twice_changes_nothing(tmp_path: Path) -> None:
    source = SqliteModelRegistry(tmp_path / "a.db")
    populate(source)
    exported = export_registry(source)
    target = SqliteModelRegistry(tmp_path / "b.db")
    import_registry(target, exported)
    before = export_registry(target)
    again = import_registry(target, exported)
    assert (again.created, again.updated, again.refused) == (0, 0, [])
    assert export_registry(target) == before


def test_typed_properties_move_as_json_values_and_stay_typed(tmp_path: Path) -> None:
    source = SqliteModelRegistry(tmp_path / "a.db")
    props = {"accuracy": Typed(0.95), "epochs": Typed(3), "layers": Typed([12]), "pi": "3.14"}
    model = source.create_model("typed", properties=props)
    source.create_version(model.id, "1", properties=props)
    exported = json.loads(json.dumps(export_registry(source)))  # through a file
    (doc,) = exported["models"]
    assert {k: doc["custom_properties"][k] for k in props} == {
        "accuracy": 0.95,
        "epochs": 3,
        "layers": [12],
        "pi": "3.14",
    }
    target = SqliteModelRegistry(tmp_path / "b.db")
    import_registry(target, exported)
    found = target.get_model("typed")
    assert found is not None
    version = target.get_version(found.id, "1")
    assert version is not None
    for got in (found.custom_properties, version.custom_properties):
        assert {k: getattr(got[k], "value", got[k]) for k in props} == json_values(props)
        assert type(got["pi"]) is str and type(got["epochs"].value) is int  # type: ignore[attr-defined]
    assert (
        import_registry(target, exported).summary()
        == "0 created, 0 updated, 2 unchanged, 0 refused"
    )


def test_the_same_artifact_with_another_digest_is_refused_and_reported(tmp_path: Path) -> None:
    source = InMemoryModelRegistry()
    populate(source)
    exported = export_registry(source)
    target = InMemoryModelRegistry()
    import_registry(target, exported)
    (bert,) = [m for m in exported["models"] if m["name"] == "team/bert"]
    bert["versions"][0]["artifacts"][0]["digest"] = "other"
    report = import_registry(target, exported)
    (refusal,) = report.refused
    assert "version '1'" in refusal and "'other'" in refusal
    (a,) = target.list_artifacts(target.get_version(target.get_model("team/bert").id, "1").id)  # type: ignore[union-attr]
    assert a.digest == "d1"


def test_not_an_export_is_a_bad_request() -> None:
    with pytest.raises(BadRequest, match="not a registry export"):
        import_registry(InMemoryModelRegistry(), {"models": []})


def test_the_cli_moves_a_registry_between_homes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = SqliteModelRegistry(tmp_path / "a" / "registry.db")
    populate(source)
    source.close()
    out = tmp_path / "export.json"
    assert main(["registry", "export", "--home", str(tmp_path / "a"), "-o", str(out)]) == 0
    assert main(["registry", "import", str(out), "--home", str(tmp_path / "b")]) == 0
    assert "6 created, 0 updated, 0 unchanged, 0 refused" in capsys.readouterr().out
    assert main(["registry", "import", str(out), "--home", str(tmp_path / "b")]) == 0
    assert "0 created, 0 updated, 6 unchanged, 0 refused" in capsys.readouterr().out
    moved = SqliteModelRegistry(tmp_path / "b" / "registry.db")
    assert without_ids(export_registry(moved)) == without_ids(json.loads(out.read_text()))


def test_refused_records_exit_2_naming_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused record is refused input (2), not a failed verification (1)."""
    out = tmp_path / "export.json"
    source = SqliteModelRegistry(tmp_path / "a" / "registry.db")
    populate(source)
    source.close()
    assert main(["registry", "export", "--home", str(tmp_path / "a"), "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    doc["models"][0]["versions"] = "not a list"
    out.write_text(json.dumps(doc))
    assert main(["registry", "import", str(out), "--home", str(tmp_path / "b")]) == 2
    assert "versions: malformed" in capsys.readouterr().err
    for models in ("x", [1, None], [{"name": "m", "versions": [1, "v"]}], [{"versions": {}}]):
        out.write_text(json.dumps({**doc, "models": models}))
        assert main(["registry", "import", str(out), "--home", str(tmp_path / "c")]) == 2
        assert "malformed" in capsys.readouterr().err, models
