"""notify on `model.refused` (register refused a Model's version for good), over the
in-memory cluster: Registered and Ready False, a reason naming the cause (VersionConflict, …),
one Warning Event
however often it is told; a registration or a digest mismatch is never undone by it, in any
order; a refusal for another uid or version is not told."""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelhooks.bootstrap import build
from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    CredentialsRefused,
    Forbidden,
    Permanent,
    Throttled,
    Unavailable,
)
from modelhooks.core.function import Skip
from modelhooks.core.model_status import REFUSALS, SIGNING_REFUSALS, refusal_reason
from modelhooks.core.settings import load_settings
from modelhooks.delivery.runtime import run
from modelhooks.events.model import (
    ArtifactPushed,
    CanonicalEvent,
    EventData,
    ModelCreated,
    ModelRefused,
)
from tests.unit.test_notify import NS, World, _event, _registered, _signed

REASON = "conflict: registry: version '1' of 'bert' was registered from another source"


def _refusal(**changes: Any) -> ModelRefused:
    data = ModelRefused(
        model="bert",
        version="1",
        uri="oci://registry.local:5000/models/other",
        namespace=NS,
        refused=REASON,
    )
    return data.replace(**changes)


def test_a_refusal_is_told_once_and_a_registration_replaces_it(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.model()
    world.notify.handle(_event(_refusal(), "r1"))
    conditions = world.conditions()
    registered, ready = conditions["Registered"], conditions["Ready"]
    assert (registered["status"], registered["reason"]) == ("False", "VersionConflict")
    assert REASON in registered["message"] and "new spec.version" in registered["message"]
    assert (ready["status"], ready["reason"]) == ("False", "VersionConflict")
    before = world.get()
    for n in range(3):  # redelivered, and the Model's next events refused alike
        world.notify.handle(_event(_refusal(), f"r-again-{n}"))
    assert world.get() == before  # nothing written again
    events = list(world.cluster.events.values())
    assert [(e.reason, e.type) for e in events] == [("VersionConflict", "Warning")]
    world.notify.handle(_event(_registered(), "ok"))  # the cause fixed: registered
    assert world.conditions()["Registered"]["status"] == "True"
    assert world.conditions()["Ready"]["status"] == "True"


def _end(tmp_path: Path, order: tuple[EventData, ...]) -> dict[str, Any]:
    world = World(tmp_path)
    world.model(signing={"enabled": True, "method": "keyless"})
    for n, data in enumerate(order):
        if isinstance(data, ModelRefused):  # told after what it may not replace: a Skip
            with contextlib.suppress(Skip):
                world.notify.handle(_event(data, f"e{n}"))
        else:
            world.notify.handle(_event(data, f"e{n}"))
    conditions = world.get()["status"]["conditions"]
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in conditions}


@pytest.mark.parametrize(
    "news",
    [
        (_refusal(), _registered()),
        (_refusal(), _registered(), _signed()),
        (_refusal(), _refusal(refused="forbidden: no"), _registered()),
    ],
    ids=["registered", "and-signed", "two-refusals"],
)
def test_the_end_does_not_depend_on_the_order(tmp_path: Path, news: tuple[EventData, ...]) -> None:
    """Where a registration is told, every order ends as it says (the refusal never undoes
    it, a registration always replaces it)."""
    ends = [_end(tmp_path, order) for order in itertools.permutations(news)]
    assert all(end == ends[0] for end in ends), ends
    assert ends[0]["Registered"][0] == "True"


def test_a_refusal_never_replaces_a_digest_mismatch(tmp_path: Path) -> None:
    """Signed with one digest, registered with another (DigestMismatch): a refusal before or
    after the registration ends alike, the mismatch told."""
    first = _signed(digest="sha256:" + "e" * 64)
    ends = [
        _end(tmp_path, (first, *order))
        for order in itertools.permutations((_refusal(), _registered()))
    ]
    assert ends[0] == ends[1] and ends[0]["Registered"][1] == "DigestMismatch", ends


def test_a_refusal_of_another_model_or_version_is_not_told(tmp_path: Path) -> None:
    world = World(tmp_path)
    created = world.model()
    with pytest.raises(Skip):  # a Model deleted and created again since: not its refusal
        world.notify.handle(_event(_refusal(model_uid="not-" + created["metadata"]["uid"])))
    with pytest.raises(Skip):
        world.notify.handle(_event(_refusal(version="2"), "v2"))
    assert "status" not in world.get() and not world.cluster.events
    world.notify.handle(_event(_refusal(model_uid=created["metadata"]["uid"]), "mine"))
    assert world.conditions()["Registered"]["reason"] == "VersionConflict"


SOURCE = "oci://registry.local:5000/models/demo"  # the test Model's spec.source, untagged


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.one_of(st.just("bert"), st.text(max_size=80)),
    version=st.one_of(st.just("1"), st.text(max_size=40)),
    uri=st.one_of(
        st.sampled_from([SOURCE, SOURCE + ":1", SOURCE + "@sha256:" + "a" * 64]),
        st.text(max_size=80),
        st.text(max_size=80).map(lambda tail: SOURCE + tail),
    ),
    refused=st.one_of(
        st.text(max_size=40_000),
        st.tuples(
            st.sampled_from(["content_changed", "signature_exists", "conflict", "forbidden"]),
            st.text(max_size=200),
        ).map(": ".join),
    ),
    uid=st.one_of(st.just(""), st.text(max_size=40)),
    function=st.sampled_from(["register", "sign"]),
    signed=st.booleans(),
)
def test_any_refusal_is_told_or_skipped(
    tmp_path_factory: pytest.TempPathFactory,
    model: str,
    version: str,
    uri: str,
    refused: str,
    uid: str,
    function: Literal["register", "sign"],
    signed: bool,
) -> None:
    """Whatever a model.refused says (a hostile sender's on a route taking canonical events),
    register's or sign's: told on the Model it names (sign's: only where the Model's source
    is), on that function's condition alone, within the condition's bounds, never over a
    signature told before; or skipped; nothing else."""
    world = World(tmp_path_factory.mktemp("w"))
    world.model(signing={"enabled": True, "method": "keyless"})
    if signed:
        world.notify.handle(_event(_signed(), "signed"))
    before = world.get()
    data = ModelRefused(
        model=model,
        version=version,
        uri=uri,
        namespace=NS,
        refused=refused,
        model_uid=uid,
        function=function,
    )
    try:
        world.notify.handle(_event(data, "fuzz"))
    except Skip:
        assert world.get() == before
        return
    except Permanent as untold:  # sign's, of no Model of its name, version and location
        assert function == "sign" and world.get() == before
        assert untold.message.endswith(": " + refused) and "no Model to tell" in untold.message
        return
    assert (model, version) == ("bert", "1")
    kind, refusals = (
        ("Signed", SIGNING_REFUSALS) if function == "sign" else ("Registered", REFUSALS)
    )
    told = world.conditions()[kind]
    assert told["reason"] == refusal_reason(refused, function)[0] and told["reason"] in refusals
    assert len(told["message"]) <= 32768 and told["status"] == "False"
    assert not (function == "sign" and signed)  # a signature is never undone by a refusal
    if function == "sign":
        assert uri.startswith(SOURCE) and "Registered" not in world.conditions()
    else:
        assert world.conditions().get("Signed", {}).get("status") in (None, "True")


@pytest.mark.parametrize(
    ("refused", "reason", "fix"),
    [
        (REASON, "VersionConflict", "archive the registered one"),
        ("forbidden: namespace 'team-a' may not act on oci://x/y", "SourceForbidden", "tenancy"),
        ("bad_request: spec.version: over 128 characters", "InvalidSpec", "spec.version"),
        ("bad_request : spec.source: no scheme", "InvalidSpec", "spec.source"),
        ("verification_failed: no", "RegistrationRefused", "new spec.version"),
        ("no code at all", "RegistrationRefused", "new spec.version"),
    ],
)
def test_the_reason_names_the_cause(tmp_path: Path, refused: str, reason: str, fix: str) -> None:
    """Each cause its reason (on Registered, Ready and the Warning Event) and what to do."""
    world = World(tmp_path)
    world.model()
    world.notify.handle(_event(_refusal(refused=refused), "r"))
    registered, ready = world.conditions()["Registered"], world.conditions()["Ready"]
    assert (registered["reason"], ready["reason"]) == (reason, reason)
    assert refused in registered["message"] and fix in registered["message"]
    assert [e.reason for e in world.cluster.events.values()] == [reason]


def test_a_refusal_for_another_cause_replaces_the_first(tmp_path: Path) -> None:
    """The Model fixed for one refusal and refused for another: the second is told (one
    Warning Event each); a registration then replaces it."""
    world = World(tmp_path)
    world.model()
    world.notify.handle(_event(_refusal(), "r1"))
    world.notify.handle(_event(_refusal(refused="forbidden: no"), "r2"))
    assert world.conditions()["Registered"]["reason"] == "SourceForbidden"
    reasons = sorted(e.reason for e in world.cluster.events.values())
    assert reasons == ["SourceForbidden", "VersionConflict"]
    world.notify.handle(_event(_registered(), "ok"))
    assert world.conditions()["Ready"]["status"] == "True"


def _raising(error: Exception) -> Any:
    def handle(event: Any) -> list[Any]:
        raise error

    return handle


@pytest.mark.parametrize(
    ("error", "status", "reason"),
    [
        (
            Conflict("version '1' of 'bert' was registered from another source"),
            200,
            "VersionConflict",
        ),
        (Forbidden("namespace 'ml' may not act on oci://x/y"), 200, "SourceForbidden"),
        (BadRequest("spec.version: over 128 characters"), 200, "InvalidSpec"),
        (Unavailable("the registry answered 503"), 503, None),
        (CredentialsRefused("the registry refused our token"), 503, None),
        (Throttled("slow down"), 429, None),
    ],
)
def test_a_model_refusal_is_told_exactly_when_it_is_for_good(
    tmp_path: Path, error: Exception, status: int, reason: str | None
) -> None:
    """Through the delivery runtime: a permanent refusal of a Model's event answers 200 with
    one model.refused (routed on to notify), whose reason notify names the cause by; a
    transient failure keeps its 5xx/429 and tells nothing (the platform redelivers); a push's
    permanent refusal (no Model waits on it) keeps its 4xx."""
    import msgspec

    app = build(load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}))
    fn = msgspec.structs.replace(app.function("register"), handle=_raising(error))
    spec = {"source": {"oci": {"reference": "reg:5000/models/bert:v1"}}, "version": "1"}
    data = ModelCreated(name="bert", namespace=NS, spec=spec, uid="u-1")
    outcome = run(fn, CanonicalEvent(id="m", source="k8s", type=data.TYPE, data=data), app.delivery)
    assert outcome.status == status
    if reason is None:
        assert outcome.replies == ()
        return
    (told,) = outcome.replies
    assert isinstance(told.data, ModelRefused) and told.data.model_uid == "u-1"
    assert refusal_reason(told.data.refused)[0] == reason
    pushed = ArtifactPushed(
        model="bert", version="1", uri="oci://reg:5000/models/bert", digest="", store="oci"
    )
    push = CanonicalEvent(id="p", source="reg", type=pushed.TYPE, data=pushed)
    outcome = run(fn, push, app.delivery)
    assert 400 <= outcome.status < 500 and outcome.replies == ()
