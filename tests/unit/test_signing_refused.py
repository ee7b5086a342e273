"""sign's refusals for good told on the Model (`model.refused`, function sign), over the
in-memory cluster and through the delivery runtime: Signed False (and Ready, while
spec.signing.enabled asks for the signature) with a reason naming the cause
(ContentChanged, SignatureExists, …), one Warning Event however often it is told; a
signature or a digest mismatch is never undone by it, in any order, and a later signature
replaces it; a refusal of another version or location is not told; what a retry may fix
tells nothing. Before, the refusal was a 4xx, dead-lettered, and the Model said NotSigned."""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Any

import msgspec
import pytest

from modelhooks.bootstrap import build
from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    ContentChanged,
    CredentialsRefused,
    Forbidden,
    NotFound,
    SignatureExists,
    Throttled,
    Unavailable,
)
from modelhooks.core.function import Skip
from modelhooks.core.model_status import SIGNING_REFUSALS, refusal_reason
from modelhooks.core.settings import load_settings
from modelhooks.delivery.runtime import run
from modelhooks.events.model import (
    ArtifactPushed,
    CanonicalEvent,
    EventData,
    ModelCreated,
    ModelRefused,
)
from tests.contract.register_order import T0
from tests.unit.signing_material import make_key, write_model
from tests.unit.test_notify import DIGEST, NS, World, _event, _registered, _signed
from tests.unit.test_registration_refused import _refusal as _registration_refusal

CHANGED = (
    "content_changed: the model under oci://registry.local:5000/models/demo is no longer the "
    "content this push names"
)
SIGNING = {"enabled": True, "method": "keyless"}


def _refusal(**changes: Any) -> ModelRefused:
    data = ModelRefused(
        model="bert",
        version="1",
        uri="oci://registry.local:5000/models/demo@" + DIGEST,
        namespace=NS,
        refused=CHANGED,
        function="sign",
    )
    return data.replace(**changes)


def test_a_signing_refusal_is_told_once_and_a_signature_replaces_it(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.model(signing=SIGNING)
    world.notify.handle(_event(_registered(), "reg"))
    world.notify.handle(_event(_refusal(), "r1"))
    conditions = world.conditions()
    signed, ready = conditions["Signed"], conditions["Ready"]
    assert (signed["status"], signed["reason"]) == ("False", "ContentChanged")
    assert CHANGED in signed["message"] and "push the version again" in signed["message"]
    assert (ready["status"], ready["reason"]) == ("False", "ContentChanged")
    assert conditions["Registered"]["status"] == "True"  # register's condition untouched
    before = world.get()
    for n in range(3):  # redelivered: the same report
        world.notify.handle(_event(_refusal(), f"r-again-{n}"))
    assert world.get() == before  # nothing written again
    warnings = [(e.reason, e.action) for e in world.cluster.events.values() if e.type == "Warning"]
    assert warnings == [("ContentChanged", "Sign")]
    world.notify.handle(_event(_signed(), "ok"))  # pushed again, signed: replaces it
    assert world.conditions()["Signed"]["status"] == "True"
    assert world.conditions()["Ready"]["status"] == "True"


def test_without_signing_asked_the_refusal_is_told_and_ready_stays(tmp_path: Path) -> None:
    """spec.signing.enabled false: Signed says the refusal, Ready (registered) stays True."""
    world = World(tmp_path)
    world.model()
    world.notify.handle(_event(_registered(), "reg"))
    world.notify.handle(_event(_refusal(), "r1"))
    assert world.conditions()["Signed"]["reason"] == "ContentChanged"
    assert world.conditions()["Ready"]["status"] == "True"


def _end(tmp_path: Path, order: tuple[EventData, ...]) -> dict[str, Any]:
    world = World(tmp_path)
    world.model(signing=SIGNING)
    for n, data in enumerate(order):
        with contextlib.suppress(Skip):  # a refusal told after what it may not replace
            world.notify.handle(_event(data, f"e{n}"))
    conditions = world.get()["status"]["conditions"]
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in conditions}


@pytest.mark.parametrize(
    "news",
    [
        (_refusal(), _signed()),
        (_refusal(), _registered(), _signed()),
        (_refusal(), _refusal(refused="signature_exists: another"), _registered(), _signed()),
        (_refusal(), _registration_refusal(), _registered(), _signed()),
    ],
    ids=["signed", "registered-and-signed", "two-refusals", "register-refused-too"],
)
def test_the_end_does_not_depend_on_the_order(tmp_path: Path, news: tuple[EventData, ...]) -> None:
    """Where a signature is told, every order ends as it says (a refusal never undoes it, a
    signature always replaces it), and a refusal of sign and one of register each stay on
    their own condition."""
    ends = [_end(tmp_path, order) for order in itertools.permutations(news)]
    assert all(end == ends[0] for end in ends), ends
    assert ends[0]["Signed"][:2] == ("True", "Signed")


def test_a_refusal_never_replaces_a_signed_digest_mismatch(tmp_path: Path) -> None:
    """Registered with one digest, signed with another (DigestMismatch on Signed): a signing
    refusal before or after that signature ends alike, the mismatch told."""
    other = _signed(digest="sha256:" + "e" * 64)
    ends = [
        _end(tmp_path, (_registered(), *order))
        for order in itertools.permutations((_refusal(), other))
    ]
    assert ends[0] == ends[1] and ends[0]["Signed"][1] == "DigestMismatch", ends


def test_both_refusals_each_on_its_condition(tmp_path: Path) -> None:
    """register's refusal on Registered, sign's on Signed: in either order both are told,
    and Ready says register's (it comes first)."""
    for order in itertools.permutations((_refusal(), _registration_refusal())):
        end = _end(tmp_path, order)
        assert end["Registered"][:2] == ("False", "VersionConflict")
        assert end["Signed"][:2] == ("False", "ContentChanged")
        assert end["Ready"][:2] == ("False", "VersionConflict")


def test_a_refusal_of_another_version_or_location_is_not_told(tmp_path: Path) -> None:
    """A push of the Model's name and version elsewhere (another repository or bucket) is
    not its source's: its refusal says nothing of this Model. Told to no Model, it fails as
    it did before it was told (its 409, naming why and carrying the refusal: dead-lettered),
    not a skip that only a log line said (a push no Model waits on: push-only)."""
    world = World(tmp_path)
    world.model(signing=SIGNING)
    for data in (
        _refusal(version="2"),
        _refusal(uri="oci://registry.local:5000/models/other@" + DIGEST),
        _refusal(uri="s3://bucket/models/bert/1/"),
        _refusal(model="gpt"),
    ):
        with pytest.raises(ContentChanged, match="no Model to tell sign's refusal") as raised:
            world.notify.handle(_event(data, "other"))
        assert raised.value.message.endswith(": " + CHANGED)
        assert "none of that name, version and location" in raised.value.message
    assert "status" not in world.get() and not world.cluster.events
    world.notify.handle(_event(_refusal(uri="oci://registry.local:5000/models/demo:1"), "tag"))
    assert world.conditions()["Signed"]["reason"] == "ContentChanged"


@pytest.mark.parametrize(
    ("refused", "reason", "fix"),
    [
        (CHANGED, "ContentChanged", "upload the registered content again"),
        ("signature_exists: another signature already exists", "SignatureExists", "--replace"),
        ("conflict: version '1' is registered with another digest", "VersionConflict", "new"),
        ("forbidden: namespace 'ml' may not act on oci://x/y", "SourceForbidden", "tenancy"),
        ("bad_request: no model files under b/m/1/", "InvalidSource", "no model files"),
        ("not_found: no such manifest", "SigningRefused", "the reason names"),
        ("no code at all", "SigningRefused", "the reason names"),
    ],
)
def test_the_reason_names_the_cause(tmp_path: Path, refused: str, reason: str, fix: str) -> None:
    """Each cause its reason (on Signed, Ready and the Warning Event) and what to do."""
    world = World(tmp_path)
    world.model(signing=SIGNING)
    world.notify.handle(_event(_registered(), "reg"))
    world.notify.handle(_event(_refusal(refused=refused), "r"))
    signed, ready = world.conditions()["Signed"], world.conditions()["Ready"]
    assert (signed["reason"], ready["reason"]) == (reason, reason)
    assert refused in signed["message"] and fix in signed["message"]
    assert reason in SIGNING_REFUSALS
    assert [e.reason for e in world.cluster.events.values() if e.type == "Warning"] == [reason]


def _raising(error: Exception) -> Any:
    def handle(event: Any) -> list[Any]:
        raise error

    return handle


def _push(uri: str = "s3://bucket/models/bert/1/", digest: str = "") -> CanonicalEvent:
    data = ArtifactPushed(model="bert", version="1", uri=uri, digest=digest, store="s3")
    data = data.replace(namespace=NS)
    return CanonicalEvent(id="p", source="minio", type=data.TYPE, data=data, time=T0)


@pytest.mark.parametrize(
    ("error", "status", "reason"),
    [
        (ContentChanged("the model under … is no longer the content"), 200, "ContentChanged"),
        (SignatureExists("another signature already exists"), 200, "SignatureExists"),
        (Conflict("version '1' is registered with another digest"), 200, "VersionConflict"),
        (Forbidden("namespace 'ml' may not act on s3://bucket/"), 200, "SourceForbidden"),
        (BadRequest("no model files under bucket/models/bert/1/"), 200, "InvalidSource"),
        (NotFound("no such manifest"), 200, "SigningRefused"),
        (Unavailable("model 'bert' version '1' is not registered yet"), 503, None),
        (CredentialsRefused("the store refused our key"), 503, None),
        (Throttled("slow down"), 429, None),
    ],
)
def test_a_signing_refusal_is_told_exactly_when_it_is_for_good(
    tmp_path: Path, error: Exception, status: int, reason: str | None
) -> None:
    """Through the delivery runtime: a permanent refusal of a push answers 200 with one
    model.refused (function sign, the push's name, version, location and namespace); a
    transient failure keeps its 5xx/429 and tells nothing (the platform redelivers), nor
    does a Model's event (sign takes none)."""
    app = build(load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}))
    fn = msgspec.structs.replace(app.function("sign"), handle=_raising(error))
    outcome = run(fn, _push(), app.delivery)
    assert outcome.status == status
    if reason is None:
        assert outcome.replies == ()
        return
    (told,) = outcome.replies
    assert isinstance(told.data, ModelRefused) and told.data.function == "sign"
    assert (told.data.model, told.data.version, told.data.namespace) == ("bert", "1", NS)
    assert told.data.uri == "s3://bucket/models/bert/1/" and told.source == "modelhooks/sign"
    assert refusal_reason(told.data.refused, "sign")[0] == reason
    again = run(fn, _push(), app.delivery)  # redelivered: the same reply, not remembered
    assert again.status == 200 and again.replies == outcome.replies
    spec = {"source": {"s3": {"uri": "s3://bucket/models/bert/1/"}}, "version": "1"}
    created = ModelCreated(name="bert", namespace=NS, spec=spec, uid="u-1")
    event = CanonicalEvent(id="m", source="k8s", type=created.TYPE, data=created)
    assert run(fn, event, app.delivery).replies == ()


def test_content_written_again_before_signing_is_told_as_content_changed(
    tmp_path: Path,
) -> None:
    """The real sign function: the model's files rewritten with other bytes after their push
    was registered, before sign hashed them. It signed nothing and answered 409,
    dead-lettered; now 200 with a model.refused ContentChanged, nothing written."""
    model = write_model(tmp_path / "store" / "models" / "bert" / "1")
    key = make_key(tmp_path).private
    env = {"MODELHOOKS_HOME": str(tmp_path), "MODELHOOKS_SIGNING_KEY": str(key)}
    app = build(load_settings(env=env))
    uri = f"file://{model}/"
    push = _push(uri, app.deps.content.digest_of(uri)).replace(source="local")
    push = push.replace(data=push.data.replace(store="local"))
    assert run(app.function("register"), push, app.delivery).status == 200
    (model / "config.json").write_bytes(b'{"layers": 3, "tampered": true}')
    outcome = run(app.function("sign"), push, app.delivery)
    assert outcome.status == 200, outcome
    (told,) = outcome.replies
    assert isinstance(told.data, ModelRefused) and told.data.uri == uri
    assert refusal_reason(told.data.refused, "sign")[0] == "ContentChanged"
    assert not (model / "model.sig").exists()


class _RefusedBeforeSign(EventData, frozen=True, kw_only=True):
    """model.refused as notify read it before sign's refusals were told (a60b2ab): no
    `function`, and, as every payload, no field it does not know (a notify not yet upgraded,
    while register and sign are)."""

    TYPE = "dev.modelhooks.model.refused"
    model: str
    version: str = ""
    uri: str = ""
    namespace: str = "default"
    refused: str
    model_uid: str = ""


def test_register_s_refusal_is_the_payload_an_older_notify_reads(tmp_path: Path) -> None:
    """Rolling upgrade: register's refusal carries no `function` (absent: register), so a
    notify from before sign's refusals still reads it and tells it on Registered; sign's
    carries `function: sign`, which that notify refuses (400, dead-lettered for a replay)
    rather than tell it on Registered. One stored since, naming register, is read as
    register's. Before: every refusal wrote function, register's too, and the older notify
    refused them all."""
    app = build(load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}))
    fn = msgspec.structs.replace(app.function("register"), handle=_raising(Conflict("taken")))
    spec = {"source": {"s3": {"uri": "s3://bucket/models/bert/1/"}}, "version": "1"}
    created = ModelCreated(name="bert", namespace=NS, spec=spec, uid="u-1")
    event = CanonicalEvent(id="m", source="k8s", type=created.TYPE, data=created)
    (told,) = run(fn, event, app.delivery).replies
    sent = told.data.to_json()  # the reply's body as sent (binary mode)
    older = msgspec.json.decode(sent, type=_RefusedBeforeSign)
    assert (older.model, older.refused, older.model_uid) == ("bert", "conflict: taken", "u-1")
    assert msgspec.json.decode(sent, type=ModelRefused).function != "sign"
    sign = msgspec.structs.replace(app.function("sign"), handle=_raising(ContentChanged("x")))
    (signs,) = run(sign, _push(), app.delivery).replies
    with pytest.raises(msgspec.ValidationError, match="function"):
        msgspec.json.decode(signs.data.to_json(), type=_RefusedBeforeSign)
    stored = msgspec.json.encode({**msgspec.to_builtins(older), "function": "register"})
    assert msgspec.json.decode(stored, type=ModelRefused).function == "register"


def test_a_push_refused_with_no_model_to_tell_is_answered_as_before(tmp_path: Path) -> None:
    """The embedded defaults (`make run`, `modelhooks serve`: no cluster access), the real
    register, sign and notify behind serve's broker route: a push whose files are written
    again once the ingress named it by its content. sign refuses it (ContentChanged), and
    its told refusal reached no Model: the push was answered 200 (notify skipping 'no
    cluster access'), the refusal in a log line only. Now notify fails it with the
    refusal's 409, naming why and carrying it, so the push is answered 409 as before sign
    told its refusals."""
    from modelhooks.delivery.broker import Broker
    from modelhooks.delivery.http import publish
    from modelhooks.delivery.router import load_triggers

    model = write_model(tmp_path / "store" / "models" / "bert" / "1")
    key = make_key(tmp_path).private
    env = {"MODELHOOKS_HOME": str(tmp_path), "MODELHOOKS_SIGNING_KEY": str(key)}
    app = build(load_settings(env=env))
    content = app.delivery.resolve
    assert content is not None

    def named_then_written_again(event: CanonicalEvent) -> CanonicalEvent:
        named = content(event)
        (model / "config.json").write_bytes(b'{"layers": 3, "tampered": true}')
        return named

    delivery = msgspec.structs.replace(app.delivery, resolve=named_then_written_again)
    triggers = load_triggers(app.settings.router.triggers)
    broker = Broker(triggers, delivery, app.settings.router.max_depth)
    uri = f"file://{model}/"
    push = ArtifactPushed(model="bert", version="1", uri=uri, digest="x", store="local")
    body = msgspec.json.encode(
        {"specversion": "1.0", "id": "p", "source": "local", "type": push.TYPE,
         "data": msgspec.to_builtins(push.replace(namespace=NS))}
    )  # fmt: skip
    headers = {"Content-Type": "application/cloudevents+json"}
    answer = publish(broker, headers, body, "/")
    assert answer.status == 409, answer.body
    outcomes = {o["function"]: o for o in msgspec.json.decode(answer.body)["outcomes"]}
    assert outcomes["sign"]["status"] == 200  # told as a reply, …
    told = outcomes["notify"]["error"]  # … to nobody
    assert told["error"] == "content_changed", told
    assert told["message"].startswith(f"no Model to tell sign's refusal of {NS}/bert"), told
    assert "no cluster access" in told["message"]
    assert "content_changed: the model under" in told["message"], told
    assert not (model / "model.sig").exists()
