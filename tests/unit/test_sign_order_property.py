"""`sign` and `register` under at least once, unordered: pushes of one version (the same
bytes, uploaded again before each push is delivered: new objects, the same content digest)
and its model's deletions (policy Retain), each push delivered to register and to sign,
shuffled and duplicated, and a sign delivery killed before any of its writes (the signature,
its binding, the version's record) and delivered again later. Whatever the order, the
version ends LIVE exactly when a push is newer than every deletion, and then it records a
signature that is next to the model, verifies, and whose binding names the objects there
now (what admission decides by); ARCHIVED, it records none."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.signing import HashOptions, KeySigner, KeyVerifier, verify_model
from modelhooks.adapters.signing.model import still_bound
from modelhooks.bootstrap import build
from modelhooks.core.errors import Unavailable
from modelhooks.core.function import Skip
from modelhooks.core.records import ModelState, stamp
from modelhooks.core.settings import load_settings
from modelhooks.core.stores import Stores
from modelhooks.events.model import ArtifactPushed, CanonicalEvent, ModelDeleted
from modelhooks.handlers.register import archive_model, register_model
from modelhooks.handlers.sign import sign_artifact
from tests.contract.register_crash import Dying, Killed
from tests.contract.register_order import T0
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.unit.signing_material import KeyPair, make_key

FILES = {"config.json": b'{"layers": 2}', "weights/w.bin": b"\x01" * 5000, "_SUCCESS": b""}


class DyingStore:
    """A store killed before its `left`-th write (put, delete) from now."""

    def __init__(self, store: Any, left: list[int | None]) -> None:
        self.store, self.left = store, left

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.store, name)
        if name not in ("put", "delete"):
            return found

        def write(*args: Any, **kwargs: Any) -> Any:
            left = self.left[0]
            if left is not None:
                if left <= 1:
                    self.left[0] = None
                    raise Killed(name)
                self.left[0] = left - 1
            return found(*args, **kwargs)

        return write


def upload(model: Path) -> None:
    """The same bytes written again: new objects (generations), the same content."""
    for name, data in FILES.items():
        path = model / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.write_bytes(data)


minutes = st.one_of(st.none(), st.integers(0, 20))


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    pushes=st.lists(minutes, min_size=1, max_size=3),
    deletions=st.lists(minutes, max_size=2),
    data=st.data(),
)
def test_the_signature_follows_the_version_whatever_the_order_and_the_kills(
    tmp_path_factory: Any, pushes: list[int | None], deletions: list[int | None], data: Any
) -> None:
    home: Path = tmp_path_factory.mktemp("sign-order")
    keys: KeyPair = make_key(home)
    model = home / "store" / "models" / "bert" / "1"
    built = build(load_settings(env={"MODELHOOKS_HOME": str(home)})).deps.stores
    left: list[int | None] = [None]
    store, bucket, prefix = built.resolve(f"file://{model}/")
    stores: Stores = built.replacing("file", DyingStore(store, left))  # type: ignore[arg-type]
    registry = InMemoryModelRegistry()
    dying = Dying(registry)
    signer = KeySigner.from_file(keys.private)
    at = lambda m: None if m is None else T0 + timedelta(minutes=m)  # noqa: E731
    pushed = ArtifactPushed(
        model="bert", version="1", uri=f"file://{model}/", digest="content-of-bert", store="gcs"
    )
    gone = ModelDeleted(name="bert", namespace="default", spec={"deletionPolicy": "Retain"})
    events = [
        CanonicalEvent(id=f"p{i}", source="t", type=pushed.TYPE, data=pushed, time=at(m))
        for i, m in enumerate(pushes)
    ] + [
        CanonicalEvent(id=f"d{i}", source="t", type=gone.TYPE, data=gone, time=at(m))
        for i, m in enumerate(deletions)
    ]
    units = [("register", e) for e in events] + [("sign", e) for e in events if e.id[0] == "p"]
    units += data.draw(st.lists(st.sampled_from(units), max_size=4), label="duplicates")
    queue = list(data.draw(st.permutations(units), label="order"))
    uploaded: set[str] = set()
    draw: Callable[..., Any] = data.draw
    retries = 0
    while queue:
        function, event = queue.pop(0)
        if event.id[0] == "p" and event.id not in uploaded:
            upload(model)  # its upload comes before the push is told
            uploaded.add(event.id)
        kill = draw(st.one_of(st.none(), st.integers(1, 4)), label="killed before write")
        dying.left, left[0] = (kill, None) if function == "register" else (None, kill)
        if function == "sign":
            dying.left = draw(st.one_of(st.none(), st.integers(1, 2)), label="registry kill")
        try:
            if function == "register" and isinstance(event.data, ArtifactPushed):
                register_model(event, event.data, registry=dying)  # type: ignore[arg-type]
            elif function == "register":
                archive_model(event, gone, registry=dying)  # type: ignore[arg-type]
            else:
                sign_artifact(
                    event, pushed, stores=stores, oci=OciClients(), registry=dying,  # type: ignore[arg-type]
                    signer=signer, options=HashOptions(),
                )  # fmt: skip
        except Killed:  # not answered: delivered again, later
            queue.insert(draw(st.integers(0, len(queue)), label="again at"), (function, event))
        except Unavailable:  # not registered yet: redelivered
            queue.append((function, event))
            retries += 1
            assert retries < 500
        except Skip:
            pass
        dying.left, left[0] = None, None

    live = max(stamp(e) for e in events if e.id[0] == "p") > max(
        (stamp(e) for e in events if e.id[0] == "d"), default=""
    )
    found = registry.get_model("bert")
    assert found is not None
    version = registry.get_version(found.id, "1")
    assert version is not None
    assert version.state == (ModelState.LIVE if live else ModelState.ARCHIVED)
    recorded = {k for k in version.custom_properties if k.startswith("signature.")}
    if not live:
        assert recorded == set()
        return
    assert version.custom_properties["signature.artifact_digest"] == pushed.digest
    assert still_bound(store, bucket, prefix)
    verified = verify_model(store, bucket, prefix, KeyVerifier(keys.public))
    assert version.custom_properties["signature.root_digest"] == f"sha256:{verified.root_digest}"
