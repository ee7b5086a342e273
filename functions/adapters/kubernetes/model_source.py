"""`modelhooks watch-models`: Knative's ApiServerSource for `Model` resources, resumable.

Every add, update and delete of a Model (modelhooks.dev/v1alpha1) becomes the CloudEvent
that ApiServerSource sends (knative.dev/eventing, pkg/adapter/apiserver/events):

    type        dev.knative.apiserver.resource.{add,update,delete}   (mode Resource)
                dev.knative.apiserver.ref.{add,update,delete}        (mode Reference)
    source      the API server's URL
    subject     /apis/<apiVersion>/namespaces/<namespace>/<kind, lowercased and pluralized>/<name>
    kind, apiversion, name, namespace   extensions (what Triggers filter on)
    data        the whole object (Resource) or {kind, namespace, name, apiVersion} (Reference)
    id          Knative sends a random UUID; here the UUID derives from the object's uid,
                resourceVersion and the action, so an event sent twice keeps its id and
                the ingress drops the second copy.

Resuming, where Knative's adapter loses what happened while its watch was down: the watch
asks for bookmarks and keeps the resourceVersion of the last event or bookmark; a broken
connection re-watches from it, and so does a line that is no watch event (a proxy's error
page, a line it cut off: an ERROR line names it, `garbled` counts them). On 410 Gone the Models are listed again and only the
difference to what was already sent goes out (`relist_changes`, by uid and
resourceVersion; a Model missing from the list is sent as deleted, as it was last sent,
without its managedFields, nor its labels and annotations past 16 KiB: `_kept`).
With a state file that resourceVersion and the objects sent survive a restart (a Model
whose events are not delivered yet, one set aside, is saved as last delivered, with no
resourceVersion: the next start lists again and sends it). What a
relist cannot show: a Model created and deleted while the watch was expired, and the
intermediate updates of one (they collapse into one update).

Namespaces, as ApiServerSource's namespaceSelector: with a label selector only the Models of
the namespaces it matches are sent, and a watch of Namespaces follows their labels. When the
matching namespaces change the Models are listed again: those of a namespace that joined go
out as added; those of one that left are forgotten, never sent as deleted (a label removed
is no deletion: nothing is cleaned up), and go out as added again if it joins again. What
happens to them while it is out, their deletion included, is not sent. A start with a
selector lists the Models (the namespaces may have changed while it was stopped), and so
does any start whose selector is not the one its state file was saved under (a file without
one: none), a start without a selector included: resuming, it would never send the Models
the old selector left out until they change.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from modelhooks.core.errors import ConfigError, Transient
from modelhooks.core.extras import require
from modelhooks.core.logs import log

# The watch is the kubernetes client's through and through: whoever imports this module to
# watch (`modelhooks watch-models`) needs the k8s extra, said before anything else is done.
require("k8s", "watching Models (watch-models)")

__all__ = [
    "GROUP",
    "PLURAL",
    "VERSION",
    "ModelWatcher",
    "WatchState",
    "relist_changes",
    "to_cloudevent",
]

GROUP, VERSION, PLURAL = "modelhooks.dev", "v1alpha1", "models"
Action = Literal["add", "update", "delete"]
Object = dict[str, Any]
_ACTIONS: dict[str, Action] = {"ADDED": "add", "MODIFIED": "update", "DELETED": "delete"}
SAVE_SPACING = 10.0  # the state saved at most once in 10 times as long as a save takes
_IDS = uuid.UUID("6f1d2c3e-8a4b-5c6d-9e0f-1a2b3c4d5e6f")  # the namespace of event ids


def to_cloudevent(
    action: Action,
    obj: Mapping[str, Any],
    source: str,
    *,
    reference: bool = False,
    at: datetime | None = None,
) -> dict[str, Any]:
    """The structured CloudEvent ApiServerSource sends for one change of `obj`, its time
    `at` (default now).

    >>> ce = to_cloudevent("add", {"apiVersion": "modelhooks.dev/v1alpha1", "kind": "Model",
    ...     "metadata": {"name": "bert", "namespace": "ml"}}, "https://k8s", reference=True)
    >>> ce["type"], ce["subject"], ce["data"]["name"]
    ('dev.knative.apiserver.ref.add', '/apis/modelhooks.dev/v1alpha1/namespaces/ml/models/bert', 'bert')
    """
    meta = obj.get("metadata") or {}
    api_version = str(obj.get("apiVersion") or f"{GROUP}/{VERSION}")
    kind, name, ns = (
        str(obj.get("kind") or "Model"),
        meta.get("name", ""),
        meta.get("namespace", ""),
    )
    ref = {"kind": kind, "namespace": ns, "name": name, "apiVersion": api_version}
    key = f"{meta.get('uid', name)}/{meta.get('resourceVersion', '')}/{action}"
    return {
        "specversion": "1.0",
        "id": str(uuid.uuid5(_IDS, key)),
        "source": source,
        "type": f"dev.knative.apiserver.{'ref' if reference else 'resource'}.{action}",
        "subject": _self_link(api_version, kind, ns, name),
        "time": (at or datetime.now(UTC)).isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        "kind": kind,
        "apiversion": api_version,
        "name": name,
        "namespace": ns,
        "data": {k: v for k, v in ref.items() if v} if reference else dict(obj),
    }


def _self_link(api_version: str, kind: str, namespace: str, name: str) -> str:
    """Knative's createSelfLink: the plural guessed from the kind as apimachinery does."""
    lower = kind.lower()
    if lower.endswith("s"):
        plural = lower + "es"
    elif lower.endswith("y"):
        plural = lower[:-1] + "ies"
    else:
        plural = lower + "s"
    if "." in api_version and "/" not in api_version:
        api_version += "/versionUnknown"
    return f"/apis/{api_version}/namespaces/{namespace}/{plural}/{name}"


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def relist_changes(
    sent: Mapping[str, Object], listed: Sequence[Object]
) -> list[tuple[Action, Object]]:
    """What to send so that whoever received `sent` (by uid) learns the `listed` state.

    Deletions first (a Model deleted and re-created under its name is two uids: the old
    one goes before the new one comes), as last sent; then adds and updates, in list order.

    >>> old = {"metadata": {"uid": "a", "resourceVersion": "1"}}
    >>> relist_changes({"a": old}, [{"metadata": {"uid": "b", "resourceVersion": "5"}}])
    [('delete', {'metadata': {'uid': 'a', 'resourceVersion': '1'}}), ('add', {'metadata': {'uid': 'b', 'resourceVersion': '5'}})]
    """
    present = {_uid(obj) for obj in listed}
    changes: list[tuple[Action, Object]] = [
        ("delete", obj) for uid, obj in sent.items() if uid not in present
    ]
    for obj in listed:
        last = sent.get(_uid(obj))
        if last is None:
            changes.append(("add", obj))
        elif _rv(last) != _rv(obj):
            changes.append(("update", obj))
    return changes


# What is kept of a Model sent: each save writes every Model kept, and a namespace's Models
# labelled up to what etcd stores (1.5 MiB) made each save write and sync 100 MB for 100 of
# them (3.4 s) at every change. So no managedFields (the API server's bookkeeping), and no
# labels and annotations past _KEPT_BYTES together: a deletion sent later for a Model a
# relist does not find carries what the functions read of it, its metadata's names, uid,
# resourceVersion, deletionTimestamp and finalizers, its spec and its status.
_KEPT_BYTES = 16 << 10


def _kept(obj: Mapping[str, Any]) -> Object:
    """`obj` as the state keeps it (see _KEPT_BYTES)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return dict(obj)
    kept = {k: v for k, v in meta.items() if k != "managedFields"}
    size = 0
    for key in ("labels", "annotations"):
        found = meta.get(key)
        if isinstance(found, Mapping):
            size += sum(len(str(k)) + len(str(v)) for k, v in found.items())
    if size > _KEPT_BYTES:
        kept.pop("labels", None)
        kept.pop("annotations", None)
    return {**obj, "metadata": kept}


@dataclass
class WatchState:
    """What was sent: every live Model as last sent (by uid; without its managedFields, nor
    its labels and annotations when they are big: `_kept`), the resourceVersion the
    watch resumes from ("" = list first) and the namespace selector the Models were sent
    under (None: every namespace). Saved as JSON by `ModelWatcher` after
    each change, at most once in SAVE_SPACING times as long as a save takes (`_save`)."""

    namespace: str | None = None
    resource_version: str = ""
    sent: dict[str, Object] = field(default_factory=dict)
    namespace_selector: str | None = None

    def is_news(self, action: Action, obj: Mapping[str, Any]) -> bool:
        """False for an add or update of what was already sent at this resourceVersion."""
        last = self.sent.get(_uid(obj))
        return action == "delete" or last is None or _rv(last) != _rv(obj)

    def record(self, action: Action, obj: Mapping[str, Any]) -> None:
        if action == "delete":
            self.sent.pop(_uid(obj), None)
        else:
            self.sent[_uid(obj)] = _kept(obj)

    def save(self, path: Path, behind: Mapping[str, Object | None] | None = None) -> None:
        """Saved; `behind`: the Models whose latest events are not delivered yet (by uid),
        each as last delivered (None: never), saved so, and with no resourceVersion: the
        next start lists the Models again and sends each what it has not had."""
        sent = {uid: _kept(obj) for uid, obj in self.sent.items()}
        for uid, obj in (behind or {}).items():
            if obj is None:
                sent.pop(uid, None)
            else:
                sent[uid] = _kept(obj)
        doc = {
            "namespace": self.namespace,
            "namespaceSelector": self.namespace_selector,
            "resourceVersion": "" if behind else self.resource_version,
        }
        tmp = path.with_name(path.name + ".tmp")
        try:
            _write_synced(tmp, json.dumps({**doc, "sent": sent}).encode())
        except OSError:  # the disk full: what it wrote of it gives the room back
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        os.replace(tmp, path)  # a crash leaves the old state or the new, never half of one
        _sync_directory(path.parent)

    @classmethod
    def load(
        cls, path: Path, namespace: str | None, namespace_selector: str | None = None
    ) -> WatchState:
        """The saved state, or a fresh one (none yet, or saved for another namespace). Saved
        under another namespace selector (a file without one: none), what was sent is kept
        but the resourceVersion is not: the Models are listed again, as the namespaces
        selected now may hold Models never sent. One a crash left empty or cut off (saves
        were not synced before) is reported and started afresh, as a start without one: a
        list sends every Model as added (those sent before again: their effects are
        idempotent), a deletion with something to clean up among them (its finalizer holds
        the Model); a Retain Model deleted meanwhile is not sent. Refused, such a file
        stopped the watch restart after restart until someone removed it."""
        if not path.exists():
            return cls(namespace, namespace_selector=namespace_selector)
        text = path.read_bytes()
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or not isinstance(doc.get("sent") or {}, dict):
                raise ValueError("expected an object with `sent`")
        except ValueError as exc:
            if _torn(text):  # what a crash left of one (written before saves were synced)
                log(
                    logging.WARNING,
                    f"{path}: the watch's state file cannot be read, as a crash leaves one "
                    f"({exc}): listing the Models again, each sent as added",
                    state_file=str(path),
                )
                return cls(namespace, namespace_selector=namespace_selector)
            # hand-edited or foreign: say so, never guess (nor write over what is not ours)
            raise ConfigError(
                f"{path}: not a watch-models state file ({exc}); remove it to start afresh"
            ) from None
        if doc.get("namespace") != namespace:
            log(
                logging.WARNING, f"{path} was saved for namespace {doc.get('namespace')!r}: ignored"
            )
            return cls(namespace, namespace_selector=namespace_selector)
        version, saved_under = str(doc.get("resourceVersion") or ""), doc.get("namespaceSelector")
        if saved_under != namespace_selector and version:
            log(
                logging.INFO,
                f"{path} was saved under namespace selector {saved_under!r}, now "
                f"{namespace_selector!r}: listing the Models again",
            )
            version = ""
        return cls(namespace, version, dict(doc.get("sent") or {}), namespace_selector)


def _write_synced(path: Path, data: bytes) -> None:
    """`data` in a new file at `path`, on the disk when this returns: renamed over the state
    file unsynced, a power loss could leave the new name on an empty file (the rename
    journaled, the data not yet written: ext4's delayed allocation, XFS)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_directory(directory: Path) -> None:
    """A rename into `directory` on the disk: until then a power loss may undo it (the
    previous state back, the position behind: events sent again, never skipped). Where a
    folder cannot be opened or synced (unreadable; a file system refusing, EINVAL), the
    state was written all the same: not a failed save (PostgreSQL's fsync_fname does so)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except PermissionError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _torn(text: bytes) -> bool:
    """Whether `text` is what a crash can leave of a state file: nothing, zeros (its length
    on the disk before its data), or the start of one, cut off or followed by zeros."""
    kept = text.strip(b"\0 \t\r\n")
    return _SAVED.startswith(kept[: len(_SAVED)])


_SAVED = b'{"namespace": '  # how a state file begins (`WatchState.save`)


class _Expired(Exception):
    """The resourceVersion to resume from is no longer served (410 Gone)."""


class _Interrupted(Exception):
    """The watch ended with an error event other than 410: watch again."""


class _Garbled(_Interrupted):
    """A watch line that is no watch event (not JSON, cut off by a proxy, not an object with
    a type and an object): what it held is not known, so the watch starts again from the
    last resourceVersion (an event it cut off comes again)."""

    def __init__(self, line: bytes) -> None:
        shown = line[:200].decode("utf-8", "replace") + ("…" if len(line) > 200 else "")
        super().__init__(f"not a watch event: {shown!r}")
        self.line = shown


def _garbled(exc: BaseException, count: int, what: str) -> None:
    """The ERROR line of a garbled watch line (`exc`, a _Garbled), the `count`th of `what`."""
    if isinstance(exc, _Garbled):
        log(
            logging.ERROR,
            f"{what}: a line that is no watch event, the watch starts again from the last "
            f"resourceVersion: {exc.line!r}",
            line=exc.line,
            garbled_total=count,
        )


class ModelWatcher:
    """Sends one CloudEvent per Model change until `close()`, resuming after disconnects.

    >>> watcher = ModelWatcher(api_client, send, reference=True, state_file=Path("w.json"))  # doctest: +SKIP
    >>> threading.Thread(target=watcher.run).start()   # doctest: +SKIP
    >>> watcher.close()                                 # doctest: +SKIP

    Events of one Model are sent in order, one at a time; with `concurrency` > 1, those of
    different Models at once (a burst of new Models is not sent one chain at a time).

    `send` raising Transient sets that Model aside (`_Lanes`): sent again after
    `set_aside[0]` seconds, then twice as long each time up to `set_aside[1]`, its later
    events waiting behind it, while the other Models' go on: one Model the receiver keeps
    refusing holds up no other. `send` raising anything else stops `run` (raising it).

    The state is saved only when nothing is in flight but the Models set aside, and saved
    with those as last delivered and no resourceVersion (`WatchState.save`): a crash never
    skips an event; what was not delivered is sent again by the next start's list.
    """

    def __init__(
        self,
        api_client: Any,
        send: Callable[[dict[str, Any]], None],
        *,
        namespace: str | None = None,
        reference: bool = False,
        state_file: Path | None = None,
        timeout_seconds: int = 240,
        concurrency: int = 1,
        namespace_selector: str | None = None,
        set_aside: tuple[float, float] = (32.0, 300.0),
    ) -> None:
        self._api, self._send, self._reference = api_client, send, reference
        self._lock = threading.RLock()  # the state, against the lanes' saves when settled
        self._lanes = _Lanes(concurrency, self._save, on_failure=self.close, waits=set_aside)
        # the Models with events not delivered yet (by uid): each as last delivered (None:
        # never), what a save records of it, and how many of its events are not delivered
        self._behind: dict[str, tuple[Object | None, int]] = {}
        self._state_file, self._timeout = state_file, timeout_seconds
        self.state = (
            WatchState.load(state_file, namespace, namespace_selector)
            if state_file
            else WatchState(namespace, namespace_selector=namespace_selector)
        )
        self._source = str(api_client.configuration.host)
        self._closed = threading.Event()
        self._response: Any = None
        self._reselect = threading.Event()  # the selected namespaces changed: list again
        self._namespaces = (
            _Namespaces(api_client, namespace_selector, self._reselected, timeout_seconds)
            if namespace_selector
            else None
        )
        self.garbled = 0  # watch lines that were no watch event, for the logs
        self._received = 0  # the events (and bookmarks) of the watch in progress
        self._unsaved = 0  # the saves that failed since the state file was last written
        self._last: datetime | None = None  # the time of the last event sent (`_clock`)
        self._saved_at, self._save_cost = 0.0, 0.0  # when the state was last saved, how long
        self._flush: threading.Timer | None = None  # the save put off (`_save`)

    def run(self) -> None:
        try:
            if self._namespaces is not None:
                self._namespaces.start()
                self._reselect.set()  # they may have changed while it was stopped
            self._run()
        finally:
            if self._namespaces is not None:
                self._namespaces.close()
            self._lanes.drain()
        self._lanes.raise_failure()
        self._save(now=True)

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        delay = 0.0
        while not self._closed.is_set():
            try:
                if self._reselect.is_set():
                    self._reselect.clear()
                    self.state.resource_version = ""
                if not self.state.resource_version:
                    self._relist()
                self._received = 0
                self._watch()
                delay = 0.0
            except _Expired:
                log(logging.WARNING, "resourceVersion expired (410 Gone): listing Models again")
                self.state.resource_version = ""
            except (ApiException, HTTPError, OSError, _Interrupted) as exc:
                if isinstance(exc, ApiException) and exc.status in (401, 403):
                    raise  # credentials or RBAC: retrying will not help
                if self._closed.is_set():
                    return
                if self._reselect.is_set():
                    continue  # broken off by `_reselected`: list again, now
                if isinstance(exc, _Garbled):
                    self.garbled += 1
                    _garbled(exc, self.garbled, "Model watch")
                if self._received:  # it worked a while (a proxy's idle timeout cut it): the
                    delay = 0.0  # waits doubled on over such cuts, up to 10 s blind each
                delay = min(max(delay * 2, 0.2), 10.0)
                log(
                    logging.WARNING,
                    f"watch interrupted ({_why(exc)}); resuming from "
                    f"resourceVersion {self.state.resource_version or '(list)'} in {delay:.1f}s",
                )
                self._closed.wait(delay)

    def close(self) -> None:
        """Stop `run`, breaking off a watch that is waiting for the next event."""
        self._closed.set()
        _break_off(self._response)
        if self._namespaces is not None:
            self._namespaces.close()

    def _reselected(self) -> None:
        """The selected namespaces changed: the Models are listed again (`_relist`)."""
        self._reselect.set()
        _break_off(self._response)

    def _selected(self) -> Callable[[Mapping[str, Any]], bool]:
        """Whether a Model is in a watched namespace, as the namespaces are selected now."""
        if self._namespaces is None:
            return lambda obj: True
        names = self._namespaces.names
        return lambda obj: (obj.get("metadata") or {}).get("namespace") in names

    def _call(self, **kwargs: Any) -> Any:
        from kubernetes import client

        api = client.CustomObjectsApi(self._api)
        ns = self.state.namespace
        if ns:
            return api.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, **kwargs)
        return api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)

    def _relist(self) -> None:
        listed = self._call()
        items = _items(listed, lambda: str(listed).encode())  # shown only when garbled
        selected = self._selected()
        self._forget(selected)
        items = [obj for obj in items if selected(obj)]
        for action, obj in relist_changes(self.state.sent, items):
            self._emit(action, obj)
        self.state.resource_version = str(listed["metadata"]["resourceVersion"])
        self._save(now=True)

    def _watch(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._response = resp = self._call(
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=self.state.resource_version,
                timeout_seconds=self._timeout,
                _preload_content=False,
                _request_timeout=(10, self._timeout + 30),
            )
        except ApiException as exc:
            if exc.status == 410:
                raise _Expired from None
            raise
        try:
            if self._closed.is_set() or self._reselect.is_set():  # before it could be broken off
                return
            for event in _events(resp):
                if self._closed.is_set() or self._reselect.is_set():
                    return
                obj, action = event.get("object") or {}, _ACTIONS.get(event.get("type", ""))
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise _Expired
                    raise _Interrupted(f"{obj.get('reason')}: {obj.get('message')}")
                if action is not None and self._selected()(obj) and self.state.is_news(action, obj):
                    self._emit(action, obj)
                self.state.resource_version = _rv(obj) or self.state.resource_version
                self._received += 1
                self._save()
        finally:
            self._response = None
            resp.release_conn()

    def _forget(self, selected: Callable[[Mapping[str, Any]], bool]) -> None:
        """The Models of namespaces no longer selected forgotten, as if never sent: nothing
        is sent for them (their namespace leaving is no deletion), and if it is selected
        again they are sent as added."""
        with self._lock:
            gone = [uid for uid, obj in self.state.sent.items() if not selected(obj)]
            for uid in gone:
                del self.state.sent[uid]
                if uid in self._behind:  # saved as never sent
                    self._behind[uid] = (None, self._behind[uid][1])
        if gone:
            log(
                logging.INFO,
                f"{len(gone)} Model(s) no longer watched: their namespace left the selection",
            )

    def _emit(self, action: Action, obj: Object) -> None:
        event = to_cloudevent(
            action, obj, self._source, reference=self._reference, at=self._clock()
        )
        uid, meta = _uid(obj), obj.get("metadata") or {}
        name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        with self._lock:  # recorded and in flight at once: no save in between
            last, count = self._behind.get(uid, (self.state.sent.get(uid), 0))
            self._behind[uid] = (last, count + 1)
            self.state.record(action, obj)
            self._lanes.submit(uid, lambda: self._deliver(uid, action, obj, event), name)
        if self.state.resource_version == "":  # during a relist: keep what was sent so far
            self._save()

    def _clock(self) -> datetime:
        """Now, later than every time this watcher gave an event before: the functions order
        a Model's deletion and its versions' registrations by their events' times (a version
        is live iff its push is newer than the model's deletion), and a relist sent a Model's
        deletion and the add of the one created again under its name within a millisecond,
        one time for both: the new Model's version was archived, its deletion said again."""
        with self._lock:
            now = datetime.now(UTC)
            if self._last is not None and now <= self._last:
                now = self._last + timedelta(microseconds=1)
            self._last = now
            return now

    def _put_off(self) -> None:
        """The save `_save` put off, now (or put off again when the lanes are busy: they
        save when they settle)."""
        with self._lock:
            self._flush = None
        self._save(now=True)

    def _deliver(self, uid: str, action: Action, obj: Object, event: dict[str, Any]) -> None:
        self._send(event)
        with self._lock:
            count = self._behind[uid][1] - 1
            if count == 0:  # its latest event: caught up
                del self._behind[uid]
            else:
                self._behind[uid] = (None if action == "delete" else dict(obj), count)

    def _save(self, *, now: bool = False) -> None:
        """The state saved, when nothing is in flight but the Models set aside (else the
        lanes save it when that is so) and nothing failed; unless `now`, at most once in
        SAVE_SPACING times as long as the last save took (else put off until then): each save
        writes every Model sent, so saving at each event of a burst took O(Models) each
        (5,000 Models: 6 MB written and synced, 90 ms, at each of their 5,000 updates).

        A state file that cannot be written (the disk full, read-only) is one ERROR line
        naming it, and the watch and the deliveries go on (a restart meanwhile resumes from
        the state last written, sending again what followed: the ingress drops what it had);
        a WARNING says when it is written again. Raised, it was lost in a lane's worker, and
        from the watch's thread it broke off the watch at every event."""
        with self._lock:
            if self._state_file is None or not self._lanes.settled():
                return
            wait = self._save_cost * SAVE_SPACING - (time.monotonic() - self._saved_at)
            if not now and wait > 0:
                if self._flush is None:
                    self._flush = threading.Timer(wait, self._put_off)
                    self._flush.daemon = True
                    self._flush.start()
                return
            if self._flush is not None:
                self._flush.cancel()
                self._flush = None
            behind = {uid: last for uid, (last, _) in self._behind.items()}
            started = time.monotonic()
            try:
                self.state.save(self._state_file, behind)
            except OSError as exc:
                self._unsaved += 1
                if self._unsaved == 1:
                    log(
                        logging.ERROR,
                        f"{self._state_file}: the watch's state cannot be written ({exc}); "
                        "watching and delivering on, a restart would resume from the state "
                        "last written (a WARNING says when it is written again)",
                        state_file=str(self._state_file),
                        reason=str(exc),
                    )
                return
            self._saved_at = time.monotonic()
            self._save_cost = self._saved_at - started
            if self._unsaved:
                log(
                    logging.WARNING,
                    f"{self._state_file}: the watch's state written again, after "
                    f"{self._unsaved} save(s) that failed",
                    state_file=str(self._state_file),
                    failures=self._unsaved,
                )
                self._unsaved = 0


class _Namespaces:
    """The names of the namespaces a label selector matches, kept current by a watch of
    Namespaces in a thread of its own; `on_change` is called after each change of them.

    A watch with a label selector reports a namespace that starts to match as ADDED and one
    that stops (its label removed or changed, or the namespace gone) as DELETED. A broken
    watch lists them again: a few names, cheaper than keeping a position."""

    def __init__(
        self, api_client: Any, selector: str, on_change: Callable[[], None], timeout: int
    ) -> None:
        self._api, self._selector, self._on_change = api_client, selector, on_change
        self._timeout = timeout
        self.names: frozenset[str] = frozenset()
        self.garbled = 0
        self._closed = threading.Event()
        self._response: Any = None

    def start(self) -> None:
        """The first list, in the caller's thread (a selector the server refuses, or an
        identity it refuses, is a ConfigError), then the watch in a thread of its own."""
        from kubernetes.client.exceptions import ApiException

        try:
            version = self._list()
        except ApiException as exc:
            if exc.status == 400:
                raise ConfigError(
                    f"namespace selector {self._selector!r} refused by the API server: "
                    f"{_reason(exc)}"
                ) from None
            if exc.status in (401, 403):  # before any Model is listed: say what it needs
                raise ConfigError(
                    f"listing the namespaces {self._selector}: {exc.status} {_reason(exc)}; "
                    "with a namespace selector the watcher's identity must be one that may "
                    "list and watch namespaces (infra/k8s/rbac/apiserversource.yaml)"
                ) from None
            raise
        threading.Thread(
            target=self._follow, args=(version,), name="watch-namespaces", daemon=True
        ).start()

    def close(self) -> None:
        self._closed.set()
        _break_off(self._response)

    def _api_call(self, **kwargs: Any) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._api).list_namespace(
            label_selector=self._selector, _preload_content=False, **kwargs
        )

    def _list(self) -> str:
        data = self._api_call().data
        doc = json.loads(data)
        items = _items(doc, data)
        self._set(frozenset(str(ns["metadata"].get("name") or "") for ns in items))
        return str(doc["metadata"]["resourceVersion"])

    def _follow(self, version: str) -> None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        expected = (ApiException, HTTPError, OSError, ValueError, _Expired, _Interrupted)
        delay = 0.0
        while not self._closed.is_set():
            try:
                version = self._watch(version or self._list())
                delay = 0.0
            except Exception as exc:  # a thread of its own: ended, it would follow no change
                if self._closed.is_set():
                    return
                if isinstance(exc, _Garbled):
                    self.garbled += 1
                    _garbled(exc, self.garbled, "namespace watch")
                version, delay = "", min(max(delay * 2, 0.2), 10.0)
                log(
                    logging.WARNING if isinstance(exc, expected) else logging.ERROR,
                    f"namespace watch interrupted ({type(exc).__name__}: {exc}); listing the "
                    f"namespaces {self._selector} again in {delay:.1f}s",
                    exc_info=None if isinstance(exc, expected) else exc,
                )
                self._closed.wait(delay)

    def _watch(self, version: str) -> str:
        """Follows the namespaces from `version` until the watch ends: the version reached."""
        self._response = resp = self._api_call(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=version,
            timeout_seconds=self._timeout,
            _request_timeout=(10, self._timeout + 30),
        )
        try:
            if self._closed.is_set():  # closed before it could be broken off
                return version
            for event in _events(resp):
                if self._closed.is_set():
                    break
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise _Expired if obj.get("code") == 410 else _Interrupted(obj.get("message"))
                name = str((obj.get("metadata") or {}).get("name") or "")
                if kind in ("ADDED", "MODIFIED"):
                    self._set(self.names | {name})
                elif kind == "DELETED":
                    self._set(self.names - {name})
                version = _rv(obj) or version
        finally:
            self._response = None
            resp.release_conn()
        return version

    def _set(self, names: frozenset[str]) -> None:
        if names == self.names:
            return
        joined, left = sorted(names - self.names), sorted(self.names - names)
        self.names = names
        log(
            logging.INFO,
            f"namespaces {self._selector}: now {len(names)}; joined {joined}, left {left}",
        )
        self._on_change()


def _break_off(response: Any) -> None:
    """A watch waiting for its next event broken off (its socket shut down). urllib3's
    `shutdown()` reaches the socket a response was handed: http.client gives it up from the
    connection when the server (a proxy) answers `Connection: close`, and then closing or
    listing again waited for the watch's timeout (240 s)."""
    with contextlib.suppress(AttributeError, ValueError, RuntimeError, OSError):
        response.shutdown()  # urllib3 ≥ 2.3; raises once released, or None
        return
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        import socket

        with contextlib.suppress(OSError):  # already closed by the server
            sock.shutdown(socket.SHUT_RDWR)


def _reason(exc: Any) -> str:
    """The message of a Kubernetes Status in an ApiException's body, else its reason."""
    try:
        return str(json.loads(exc.body)["message"])
    except (TypeError, ValueError, KeyError):
        return str(exc.reason)


class _Lanes:
    """Calls run in order per key, `workers` keys at once; `on_settled` is called when the
    last call in flight ends and none failed (the keys set aside wait, not in flight).

    A call that raises Transient sets its key aside: logged as an ERROR naming it (`name`)
    and the reason, counted, called again after `waits[0]`, then twice as long each time up
    to `waits[1]`, while the other keys go on; its key's later calls wait behind it (one
    key's calls never overtake each other). Anything else raised is kept
    (`raise_failure`), `on_failure` is called, and nothing more is run.

    A call whose key has one in flight or set aside waits in that key's queue, not in a
    worker: the worker that ends a key's call takes its next one (a Model's echoed status
    update does not hold a worker while its create is sent, which halved a burst's
    concurrency); a key set aside holds no worker while it waits."""

    def __init__(
        self,
        workers: int,
        on_settled: Callable[[], None],
        on_failure: Callable[[], None],
        waits: tuple[float, float] = (32.0, 300.0),
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="watch-send")
        self._on_settled, self._on_failure, self._waits = on_settled, on_failure, waits
        self._lock = threading.Lock()
        self._due = threading.Condition(self._lock)  # a key set aside, or drain
        # keys in flight or set aside: (name, call) in order, the first one's being run
        self._queues: dict[str, collections.deque[tuple[str, Callable[[], None]]]] = {}
        self._failing: dict[str, float] = {}  # key set aside → its last wait, until delivered
        self._waiting: dict[str, float] = {}  # key set aside → when it is run again
        self._pending = 0
        self._failure: BaseException | None = None
        self._draining = False
        self._resumer: threading.Thread | None = None
        self.set_aside = 0  # how many times a key was set aside, for the logs

    def submit(self, key: str, call: Callable[[], None], name: str = "") -> None:
        with self._lock:
            self.raise_failure()
            self._pending += 1
            queue = self._queues.get(key)
            if queue is not None:  # runs after the key's call in flight or set aside
                queue.append((name or key, call))
                return
            self._queues[key] = collections.deque([(name or key, call)])
            self._pool.submit(self._run, key)

    def _run(self, key: str) -> None:
        while True:
            with self._lock:
                if self._failure is not None:
                    return
                name, call = self._queues[key][0]
            try:
                call()
            except Transient as exc:
                self._put_aside(key, name, exc)
                return
            except BaseException as exc:
                with self._lock:
                    self._failure = self._failure or exc
                self._on_failure()
                return
            with self._lock:
                queue = self._queues[key]
                queue.popleft()
                self._pending -= 1
                recovered = self._failing.pop(key, None) is not None
                if not queue:
                    del self._queues[key]
                settled = self._settled()
            if recovered:
                log(logging.WARNING, f"Model {name} delivered after being set aside", model=name)
            if settled:
                self._on_settled()
            if not queue:
                return

    def _put_aside(self, key: str, name: str, exc: Transient) -> None:
        with self._lock:
            last = self._failing.get(key)
            wait = self._waits[0] if last is None else min(last * 2, self._waits[1])
            self._failing[key], self._waiting[key] = wait, time.monotonic() + wait
            self.set_aside += 1
            aside, total, settled = len(self._waiting), self.set_aside, self._settled()
            if self._resumer is None:
                self._resumer = threading.Thread(
                    target=self._resume, name="watch-set-aside", daemon=True
                )
                self._resumer.start()
            self._due.notify()
        log(
            logging.ERROR,
            f"Model {name} set aside, sent again in {wait:g} s (its later events wait behind "
            f"it, the other Models' go on): {exc.message}",
            model=name,
            reason=exc.message,
            retry_in=wait,
            set_aside=aside,
            set_aside_total=total,
        )
        if settled:
            self._on_settled()

    def _resume(self) -> None:
        """Each key set aside run again when its time comes (one thread for them all)."""
        with self._lock:
            while not self._draining:
                now = time.monotonic()
                for key in [k for k, at in self._waiting.items() if at <= now]:
                    del self._waiting[key]
                    self._pool.submit(self._run, key)
                soonest = min(self._waiting.values(), default=None)
                self._due.wait(None if soonest is None else soonest - now)

    def _settled(self) -> bool:
        """Nothing in flight but the keys set aside, and nothing failed (under the lock)."""
        waiting = sum(len(self._queues[key]) for key in self._waiting)
        return self._pending == waiting and self._failure is None

    def settled(self) -> bool:
        with self._lock:
            return self._settled()

    def drain(self) -> None:
        """Wait for the calls in flight; the keys set aside are not run again."""
        with self._lock:
            self._draining = True
            self._due.notify()
        self._pool.shutdown(wait=True)

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure


def _items(listed: Any, raw: bytes | Callable[[], bytes]) -> list[dict[str, Any]]:
    """The objects of a list answer, each with its metadata; _Garbled (naming `raw`, made
    only then when a callable: the text of a list of big Models is 100 MB, 2 s to make) for
    one that is none: a proxy's page, items that are no objects ([null] raised out of the
    watcher, which stopped)."""
    items = listed.get("items") or [] if isinstance(listed, dict) else None
    if (
        not isinstance(listed, dict)
        or not isinstance(listed.get("metadata"), dict)
        or not isinstance(items, list)
        or not all(isinstance(o, dict) and isinstance(o.get("metadata"), dict) for o in items)
    ):
        raise _Garbled(raw() if callable(raw) else raw)
    return items


def _events(resp: Any) -> Iterator[dict[str, Any]]:
    """The watch events of a watch response, as they arrive: _Garbled at a line that is none
    (a proxy's error page, a line it cut off, JSON of another shape)."""
    buffer = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield _event(line)


def _event(line: bytes) -> dict[str, Any]:
    """One watch event: {"type": str, "object": {…, "metadata": {…}}}, else _Garbled."""
    try:
        event = json.loads(line)
    except ValueError:  # not JSON, cut off, not UTF-8
        raise _Garbled(line) from None
    obj = event.get("object") if isinstance(event, dict) else None
    if (
        not isinstance(event, dict)
        or not isinstance(event.get("type"), str)
        or not isinstance(obj, dict)
        or not isinstance(obj.get("metadata") or {}, dict)
    ):
        raise _Garbled(line)
    return event


def _why(exc: BaseException) -> str:
    """Why the Model watch broke, in a line: the API server's status and reason, not the
    Kubernetes client's exception with its HTTP headers; a 404 is a cluster that serves no
    Models (the CRD not applied yet, or another cluster named), which the watch waits for."""
    from kubernetes.client.exceptions import ApiException

    if not isinstance(exc, ApiException) or not exc.status:
        return f"{type(exc).__name__}: {exc}"
    if exc.status == 404:
        return (
            f"the API server serves no Models ({PLURAL}.{GROUP}/{VERSION}: 404): apply the "
            "Model CRD, kubectl apply -f infra/k8s/crds/model.yaml"
        )
    body = " ".join(str(exc.body or "").split())[:300]
    return f"{exc.status} {exc.reason}" + (f": {body}" if body else "")
