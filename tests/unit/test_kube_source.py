"""watch-models speaks ApiServerSource (Resource and Reference modes) as Knative's adapter
does, the translator reads both back, and a relist sends exactly what changed."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.kubernetes.model_source import (
    WatchState,
    relist_changes,
    to_cloudevent,
)
from modelhooks.events.ingress import decode
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import ModelCreated, ModelDeleted, ModelUpdated
from modelhooks.events.sources import translate

SAMPLES = Path(__file__).resolve().parents[2] / "events" / "samples"
MODEL = {
    "apiVersion": "modelhooks.dev/v1alpha1",
    "kind": "Model",
    "metadata": {"name": "bert", "namespace": "ml", "uid": "u-1", "resourceVersion": "42"},
    "spec": {"source": {"gcs": {"uri": "gs://m/models/bert/3/"}}, "version": "3"},
}


def model(uid: str, rv: str, name: str = "bert") -> dict[str, Any]:
    return {
        **MODEL,
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "resourceVersion": rv},
    }


def roundtrip(action: Any, *, reference: bool = False) -> Any:
    ce = to_cloudevent(action, MODEL, "https://127.0.0.1:6443", reference=reference)
    (inbound,) = decode({"Content-Type": "application/cloudevents+json"}, json.dumps(ce).encode())
    (event,) = translate(inbound, layout=ObjectLayout())
    return event


@pytest.mark.parametrize("reference", [False, True])
def test_every_action_translates_to_its_lifecycle_event(reference: bool) -> None:
    expected = {"add": ModelCreated, "update": ModelUpdated, "delete": ModelDeleted}
    for action, kind in expected.items():
        event = roundtrip(action, reference=reference)
        assert isinstance(event.data, kind)
        assert (event.data.name, event.data.namespace) == ("bert", "ml")
        assert event.time is not None
    assert roundtrip("delete").data.version == "3"  # Resource mode carries the spec


def test_resource_mode_has_knatives_attributes_and_the_whole_object() -> None:
    ce = to_cloudevent("update", MODEL, "https://10.96.0.1:443")
    sample = json.loads((SAMPLES / "k8s-resource-update.json").read_text())
    assert set(ce) == set(sample) | {"apiversion"}  # Knative added it in 2023 (#6696)
    assert ce["type"] == "dev.knative.apiserver.resource.update"
    assert ce["source"] == "https://10.96.0.1:443"
    assert ce["subject"] == "/apis/modelhooks.dev/v1alpha1/namespaces/ml/models/bert"
    assert (ce["kind"], ce["apiversion"], ce["name"], ce["namespace"]) == (
        "Model",
        "modelhooks.dev/v1alpha1",
        "bert",
        "ml",
    )
    assert ce["data"] == MODEL and ce["datacontenttype"] == "application/json"


def test_reference_mode_data_is_an_object_reference_in_knatives_field_order() -> None:
    ce = to_cloudevent("delete", MODEL, "s", reference=True)
    sample = json.loads((SAMPLES / "k8s-ref-delete.json").read_text())
    assert ce["type"] == sample["type"] == "dev.knative.apiserver.ref.delete"
    assert ce["data"] == {
        "kind": "Model",
        "namespace": "ml",
        "name": "bert",
        "apiVersion": "modelhooks.dev/v1alpha1",
    }
    assert list(ce["data"]) == list(sample["data"])
    cluster_scoped = to_cloudevent(
        "add", {"kind": "Model", "metadata": {"name": "x"}}, "s", reference=True
    )
    assert "namespace" not in cluster_scoped["data"]  # ObjectReference fields are omitempty


def test_subject_pluralizes_the_kind_as_apimachinery_guesses_it() -> None:
    def subject(api_version: str, kind: str) -> str:
        obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "n", "namespace": "d"}}
        return str(to_cloudevent("add", obj, "s")["subject"])

    assert subject("v1", "Pod") == "/apis/v1/namespaces/d/pods/n"
    assert subject("x.dev/v1", "Policy") == "/apis/x.dev/v1/namespaces/d/policies/n"
    assert subject("x.dev/v1", "Address") == "/apis/x.dev/v1/namespaces/d/addresses/n"
    assert subject("x.dev", "Model") == "/apis/x.dev/versionUnknown/namespaces/d/models/n"


def test_ids_are_uuids_stable_per_uid_resource_version_and_action() -> None:
    a, b = to_cloudevent("update", MODEL, "s"), to_cloudevent("update", MODEL, "s2")
    assert a["id"] == b["id"] and uuid.UUID(a["id"]).version == 5
    assert to_cloudevent("delete", MODEL, "s")["id"] != a["id"]
    assert to_cloudevent("update", model("u-1", "43"), "s")["id"] != a["id"]
    assert to_cloudevent("update", MODEL, "s", reference=True)["id"] == a["id"]


def test_relist_sends_deletes_first_then_adds_and_updates_and_nothing_unchanged() -> None:
    sent = {"a": model("a", "1", "a"), "b": model("b", "2", "b"), "c": model("c", "3", "c")}
    listed = [model("b", "2", "b"), model("c", "9", "c"), model("d", "8", "d")]
    changes = [(action, obj["metadata"]["uid"]) for action, obj in relist_changes(sent, listed)]
    assert changes == [("delete", "a"), ("update", "c"), ("add", "d")]
    assert relist_changes(sent, list(sent.values())) == []
    assert [a for a, _ in relist_changes({}, listed)] == ["add", "add", "add"]


def test_a_model_recreated_under_its_name_is_a_delete_then_an_add() -> None:
    changes = relist_changes({"old": model("old", "1")}, [model("new", "5")])
    assert [(a, o["metadata"]["uid"]) for a, o in changes] == [("delete", "old"), ("add", "new")]
    assert changes[0][1]["metadata"]["resourceVersion"] == "1"  # the delete is as last sent


def test_state_skips_what_was_sent_and_survives_a_save(tmp_path: Path) -> None:
    state = WatchState("ml", "42")
    assert state.is_news("add", MODEL)
    state.record("add", MODEL)
    assert not state.is_news("update", MODEL) and state.is_news("update", model("u-1", "43"))
    assert state.is_news("delete", MODEL)
    path = tmp_path / "state.json"
    state.save(path)
    assert WatchState.load(path, "ml") == state
    assert WatchState.load(path, "other") == WatchState("other")  # another scope: start over
    assert WatchState.load(tmp_path / "none.json", None) == WatchState()
    state.record("delete", model("u-1", "50"))
    assert state.sent == {}


def test_a_state_saved_under_another_namespace_selector_lists_again(tmp_path: Path) -> None:
    """The selector is saved with the state; loaded under another one (or none), what was
    sent is kept but the resourceVersion is not (list first); a file of before the selector
    was saved is one saved under none."""
    path, selector = tmp_path / "state.json", "modelhooks.dev/models=enabled"
    WatchState("ml", "42", {"u-1": MODEL}, selector).save(path)
    assert json.loads(path.read_text())["namespaceSelector"] == selector
    assert WatchState.load(path, "ml", selector) == WatchState("ml", "42", {"u-1": MODEL}, selector)
    assert WatchState.load(path, "ml") == WatchState("ml", "", {"u-1": MODEL})  # none now
    assert WatchState.load(path, "ml", "team=a") == WatchState("ml", "", {"u-1": MODEL}, "team=a")

    path.write_text(json.dumps({"namespace": "ml", "resourceVersion": "42", "sent": {}}))
    assert WatchState.load(path, "ml") == WatchState("ml", "42")  # an old file: under none
    assert WatchState.load(path, "ml", selector) == WatchState("ml", "", {}, selector)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"sent": [1]}'])
def test_a_state_file_that_is_not_one_is_refused_naming_it(tmp_path: Path, text: str) -> None:
    from modelhooks.adapters.kubernetes.model_source import WatchState
    from modelhooks.core.errors import ConfigError

    state = tmp_path / "watch.json"
    state.write_text(text)
    with pytest.raises(ConfigError, match="not a watch-models state file"):
        WatchState.load(state, None)


def saved_text(tmp_path: Path) -> bytes:
    """A real state file's bytes, as `save` writes them."""
    path = tmp_path / "whole.json"
    WatchState("ml", "42", {"u-1": MODEL}).save(path)
    return path.read_bytes()


@pytest.mark.parametrize(
    "left",
    [
        lambda whole: b"",  # the rename on the disk, the data not (delayed allocation)
        lambda whole: b"\0" * len(whole),  # its length on the disk, its data not
        lambda whole: whole[: len(whole) // 2],  # cut off
        lambda whole: whole[:10] + b"\0" * (len(whole) - 10),  # its first block only
    ],
    ids=["empty", "zeros", "half", "zero-tail"],
)
def test_a_state_file_a_crash_left_unreadable_is_reported_and_the_models_listed_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, left: Any
) -> None:
    """What an unsynced save could leave after a power loss: a WARNING naming the file and
    a fresh state (a list sends every Model), not a start refused restart after restart."""
    state = tmp_path / "watch.json"
    state.write_bytes(left(saved_text(tmp_path)))
    selector = "modelhooks.dev/models=enabled"
    with caplog.at_level("WARNING"):
        assert WatchState.load(state, "ml", selector) == WatchState(
            "ml", namespace_selector=selector
        )
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert str(state) in warning.getMessage() and "listing the Models again" in warning.getMessage()


def test_a_save_is_on_the_disk_before_its_rename_and_the_rename_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new file's data is synced before it is renamed over the state file, and its
    folder after: unsynced, a power loss could leave the state file empty (or the rename
    undone)."""
    import os

    done: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def synced(fd: int) -> None:
        done.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def renamed(src: Any, dst: Any) -> None:
        done.append(("rename", f"{src} -> {dst}"))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", synced)
    monkeypatch.setattr(os, "replace", renamed)
    path = tmp_path / "watch.json"
    WatchState("ml", "42", {"u-1": MODEL}).save(path)
    tmp = f"{path}.tmp"
    assert done == [("fsync", tmp), ("rename", f"{tmp} -> {path}"), ("fsync", str(tmp_path))]
    assert WatchState.load(path, "ml") == WatchState("ml", "42", {"u-1": MODEL})


def test_a_folder_the_file_system_will_not_sync_still_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some file systems refuse fsync(2) of a folder (EINVAL): the state file is written
    and renamed all the same, not a failed save (an ERROR at every save, for nothing)."""
    import errno
    import os
    import stat

    fsync = os.fsync

    def refused_for_folders(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "Invalid argument")
        fsync(fd)

    monkeypatch.setattr(os, "fsync", refused_for_folders)
    path = tmp_path / "watch.json"
    WatchState("ml", "42", {"u-1": MODEL}).save(path)
    assert WatchState.load(path, "ml") == WatchState("ml", "42", {"u-1": MODEL})
