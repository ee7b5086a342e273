"""watch-models' state keeps of each Model what a later deletion carries and the functions
read, not its managedFields, nor its labels and annotations past 16 KiB: every save writes
every Model kept."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from modelhooks.adapters.kubernetes.model_source import WatchState, relist_changes

PREFIX = ("p" * 61 + ".") * 4 + "q" * 5  # a label key's longest prefix


def _model(n: int, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "modelhooks.dev/v1alpha1",
        "kind": "Model",
        "metadata": {
            "name": f"m{n}",
            "namespace": "ml",
            "uid": f"u{n}",
            "resourceVersion": str(n),
            "generation": 1,
            "finalizers": ["modelhooks.dev/cleanup"],
            "labels": labels,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}" * 1000},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:metadata": {}}}],
        },
        "spec": {"source": {"gcs": {"uri": f"gs://b/m{n}/1/"}}, "version": "1"},
        "status": {"resolvedDigest": "sha256:" + "a" * 64},
    }


def test_a_namespace_of_big_models_costs_each_save_what_the_functions_read(
    tmp_path: Path,
) -> None:
    """100 Models labelled up to what etcd stores (1 MB each): each save wrote and synced
    100 MB (3.4 s) at every change, the watch of every namespace waiting on it."""
    big = {f"{PREFIX}/{i:05d}{'n' * 58}": "x" * 63 for i in range(2600)}  # ~1 MB
    state = WatchState("ml")
    for n in range(100):
        state.record("add", _model(n, big))
    path = tmp_path / "state.json"
    started = time.perf_counter()
    state.save(path)
    elapsed = time.perf_counter() - started
    assert path.stat().st_size < 100_000 and elapsed < 1.0, (path.stat().st_size, elapsed)
    kept = WatchState.load(path, "ml").sent["u7"]
    assert kept["metadata"] == {
        "name": "m7", "namespace": "ml", "uid": "u7", "resourceVersion": "7",
        "generation": 1, "finalizers": ["modelhooks.dev/cleanup"],
    }  # fmt: skip
    state.record("update", _model(7, {"team": "nlp"}))  # small: its labels are kept
    small = state.sent["u7"]["metadata"]
    assert small["labels"] == {"team": "nlp"} and "annotations" in small
    assert "managedFields" not in small
    assert (kept["spec"], kept["status"]) == (_model(7, {})["spec"], _model(7, {})["status"])
    # a Model a relist does not find is sent as deleted as kept: what cleanup reads of it
    ((action, gone), *_) = relist_changes(WatchState.load(path, "ml").sent, [])
    assert action == "delete" and gone["spec"]["source"] == {"gcs": {"uri": "gs://b/m0/1/"}}
    assert json.loads(json.dumps(gone))["metadata"]["uid"] == "u0"


def test_a_model_behind_is_saved_as_kept_too(tmp_path: Path) -> None:
    """One whose latest event is not delivered yet is saved as last delivered, kept alike."""
    state = WatchState("ml")
    state.record("add", _model(1, {"a": "b"}))
    path = tmp_path / "state.json"
    big = {f"k{i}": "v" * 63 for i in range(300)}  # 20 KB
    state.save(path, behind={"u1": _model(1, big), "u2": _model(2, big)})
    sent = json.loads(path.read_text())["sent"]
    assert set(sent) == {"u1", "u2"}
    assert all("labels" not in m["metadata"] and "managedFields" not in m["metadata"]
               for m in sent.values())  # fmt: skip


class _Listed(dict):  # type: ignore[type-arg]
    """A list answer that counts being made text (its repr: 100 MB, 2 s for 100 big Models)."""

    shown = 0

    def __repr__(self) -> str:
        _Listed.shown += 1
        return super().__repr__()


def test_a_relist_makes_no_text_of_the_list_it_takes(tmp_path: Path) -> None:
    """The list's text names a garbled answer in its ERROR line; a good one's was made at
    every relist all the same: 2.25 s and 200 MB for 100 Models labelled up to 1 MB each."""
    from types import SimpleNamespace

    from modelhooks.adapters.kubernetes.model_source import ModelWatcher

    sent: list[dict[str, Any]] = []
    api = SimpleNamespace(configuration=SimpleNamespace(host="https://apiserver"))
    watcher = ModelWatcher(api, sent.append, namespace="ml")
    listed = _Listed(metadata={"resourceVersion": "5"}, items=[_model(1, {"a": "b"})])
    watcher._call = lambda **_: listed  # type: ignore[method-assign]
    watcher._relist()
    watcher._lanes.drain()
    assert [e["type"] for e in sent] == ["dev.knative.apiserver.resource.add"]
    assert _Listed.shown == 0 and watcher.state.resource_version == "5"
