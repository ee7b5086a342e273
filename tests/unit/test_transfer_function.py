"""The `transfer` function over the in-memory registry (it passes the registry contract
tests): the event's fields as the settings they stand for, over the process's own
MODEL_SYNC_* configuration; tenancy on both locations; the real copy and registration
between local directories (the `ends` a test gives, as `build(registry=…)` takes a fake);
a redelivery changes nothing; a failure leaves the artifact ABANDONED with the reason."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from modelhooks.adapters.transfer.request import Deadline, Transfers, arguments
from modelhooks.adapters.transfer.stores import LocalEnd
from modelhooks.core.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    Unavailable,
)
from modelhooks.core.records import ArtifactState
from modelhooks.core.stores import Stores
from modelhooks.core.tenancy import Tenancy
from modelhooks.events import requests as examples
from modelhooks.events.model import CanonicalEvent, ModelRegistered, TransferRequested, parse
from modelhooks.events.sources.canonical import from_canonical_cloudevent
from modelhooks.handlers import transfer
from tests.fakes.memory_registry import InMemoryModelRegistry

# the process's configuration: the credentials the event never carries
ENV = {
    "MODEL_SYNC_SOURCE_AWS_ACCESS_KEY_ID": "source-key",
    "MODEL_SYNC_SOURCE_AWS_SECRET_ACCESS_KEY": "source-secret",
    "MODEL_SYNC_SOURCE_AWS_ENDPOINT": "http://minio.internal:9000",
    "MODEL_SYNC_DESTINATION_OCI_ENABLE_TLS_VERIFY": "false",
}


def request(**changes: Any) -> TransferRequested:
    (event,) = from_canonical_cloudevent(examples.inbound("transfer-requested"))
    raw = {**event.data.to_dict(), **changes}
    return parse(TransferRequested, raw)


def handle(event: CanonicalEvent, **deps: Any) -> list[CanonicalEvent]:
    """The handler with `stores` as the process builds it (public addresses only)."""
    deps.setdefault("stores", Stores({}, local_root=Path("/nonexistent")))
    return transfer.handle(event, **deps)


def event_of(data: TransferRequested) -> CanonicalEvent:
    return CanonicalEvent.new(data, source="/test", id="t-1")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    (root / "weights").mkdir(parents=True)
    (root / "config.json").write_text('{"layers": 2}')
    (root / "weights" / "w.bin").write_bytes(b"\x01" * 70_000)
    return root


@pytest.fixture
def local(tmp_path: Path, model_dir: Path) -> Transfers:
    """The real transfer between two directories (the ends), over ENV."""
    out = tmp_path / "out"
    return Transfers(
        env={**ENV, "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state")},
        ends=lambda cfg: (LocalEnd(str(model_dir)), LocalEnd(str(out))),
    )


def test_the_sample_copies_registers_and_replies_model_registered(local: Transfers) -> None:
    registry = InMemoryModelRegistry()
    event = event_of(request())
    (reply,) = handle(event, registry=registry, tenancy=Tenancy(), transfers=local)
    data = reply.data
    assert isinstance(data, ModelRegistered) and reply.id == event.derived_id("registered")
    assert (data.model, data.version, data.namespace, data.created) == (
        "sentiment",
        "1",
        "ml",
        True,
    )
    model = registry.get_model("sentiment")
    assert model is not None and data.registered_model_id == model.id
    assert model.description == "sentiment classifier"
    version = registry.get_version(model.id, "1")
    assert version is not None and data.model_version_id == version.id
    assert version.custom_properties["kubeflow.author"] == "ml-team"
    (artifact,) = registry.list_artifacts(version.id)
    assert artifact.id == data.model_artifact_id and artifact.state == ArtifactState.LIVE
    assert artifact.digest == data.digest and data.digest.startswith("sha256:")
    assert artifact.custom_properties["kubeflow.model_format_name"] == "onnx"
    assert Path(data.uri, "weights", "w.bin").read_bytes() == b"\x01" * 70_000


def test_a_redelivery_finds_the_same_model_version_artifact_and_copy(local: Transfers) -> None:
    registry = InMemoryModelRegistry()
    args = {"registry": registry, "tenancy": Tenancy(), "transfers": local}
    (first,) = handle(event_of(request()), **args)
    (again,) = handle(event_of(request()), **args)  # the same delivery: answered as the first
    assert (again.id, again.data) == (first.id, first.data)
    other = CanonicalEvent.new(request(), source="/test", id="t-2")  # another, same request
    (another,) = handle(other, **args)
    assert isinstance(first.data, ModelRegistered) and isinstance(another.data, ModelRegistered)
    assert another.data.created is False and first.data.created is True
    ids = lambda d: (d.registered_model_id, d.model_version_id, d.model_artifact_id, d.digest)  # noqa: E731
    assert ids(another.data) == ids(first.data)
    assert len(registry.models) == len(registry.versions) == len(registry.artifacts) == 1


def test_a_failed_copy_leaves_the_artifact_abandoned_with_the_reason(tmp_path: Path) -> None:
    registry = InMemoryModelRegistry()
    gone = Transfers(
        env=ENV, ends=lambda cfg: (LocalEnd(str(tmp_path / "none")), LocalEnd(str(tmp_path / "o")))
    )
    with pytest.raises(NotFound):
        handle(event_of(request()), registry=registry, tenancy=Tenancy(), transfers=gone)
    (artifact,) = registry.artifacts.values()
    assert artifact.state == ArtifactState.ABANDONED
    assert "no such file or directory" in artifact.custom_properties["modelhooks.failure_reason"]


def test_past_the_timeout_the_copy_stops_abandoned_and_a_redelivery_resumes(
    local: Transfers,
) -> None:
    registry = InMemoryModelRegistry()
    slow = Transfers(env=local.env, ends=local.ends, timeout=1e-9)
    time.sleep(0.001)
    with pytest.raises(Unavailable, match=r"transfer\.timeout"):
        handle(event_of(request()), registry=registry, tenancy=Tenancy(), transfers=slow)
    (artifact,) = registry.artifacts.values()
    assert artifact.state == ArtifactState.ABANDONED
    (reply,) = handle(event_of(request()), registry=registry, tenancy=Tenancy(), transfers=local)
    (artifact,) = registry.artifacts.values()
    assert artifact.state == ArtifactState.LIVE and isinstance(reply.data, ModelRegistered)


def test_the_deadline_stops_a_copy_only_once_it_has_passed() -> None:
    deadline = Deadline(60)
    deadline.advance(10)  # well within
    deadline.stop = time.monotonic() - 1
    with pytest.raises(Unavailable, match="60 s passed after 20 bytes"):
        deadline.advance(10)


def test_the_event_stands_for_args_and_the_credentials_come_from_the_configuration() -> None:
    args = arguments(request())
    assert args["source_aws_bucket"] == "models" and args["source_aws_key"] == "models/sentiment/1/"
    assert args["destination_oci_uri"] == "registry.example.com/ml/sentiment:1"
    assert not [k for k in args if "access_key" in k or "password" in k or "credentials" in k]
    cfg = Transfers(env=ENV, allow_local=False).config(request())
    assert cfg.source.get("aws_access_key_id") == "source-key"  # the process's, not the event's
    assert cfg.source.get("aws_endpoint") == "http://minio.internal:9000"
    assert cfg.flag("destination_oci_enable_tls_verify")  # an event names the host: verified
    assert cfg.allow_local is False and cfg.sign is False
    assert cfg.metadata.of("ModelVersion")["custom_properties"]["accuracy"] == 0.93


def test_a_credential_the_process_lacks_is_a_deployment_gap_503_naming_it() -> None:
    with pytest.raises(Unavailable, match="source_aws_secret_access_key") as caught:
        Transfers(env={}).config(request())
    assert "MODEL_SYNC_SOURCE_AWS_SECRET_ACCESS_KEY" in caught.value.message


def test_create_version_finds_the_model_by_name_or_answers_404(local: Transfers) -> None:
    registry = InMemoryModelRegistry()
    asked = request(intent="create_version", version={"name": "2"})
    with pytest.raises(NotFound, match="sentiment"):
        handle(event_of(asked), registry=registry, tenancy=Tenancy(), transfers=local)
    model = registry.create_model("sentiment", properties={})
    (reply,) = handle(event_of(asked), registry=registry, tenancy=Tenancy(), transfers=local)
    assert isinstance(reply.data, ModelRegistered)
    assert reply.data.registered_model_id == model.id and reply.data.version == "2"


def test_update_artifact_updates_the_one_named(local: Transfers) -> None:
    registry = InMemoryModelRegistry()
    (first,) = handle(event_of(request()), registry=registry, tenancy=Tenancy(), transfers=local)
    assert isinstance(first.data, ModelRegistered)
    update = request(intent="update_artifact", artifact={"id": first.data.model_artifact_id})
    (reply,) = handle(event_of(update), registry=registry, tenancy=Tenancy(), transfers=local)
    assert isinstance(reply.data, ModelRegistered)
    assert reply.data.model_artifact_id == first.data.model_artifact_id
    assert len(registry.artifacts) == 1


TENANTS = Tenancy.parse("ml=s3://models,oci://registry.example.com/ml/*;other=s3://other")


@pytest.mark.parametrize(
    ("changes", "location"),
    [
        ({"source": {"type": "s3", "bucket": "other", "key": "m/"}}, "s3://other"),
        (
            {"destination": {"type": "oci", "uri": "registry.example.com/team-b/m:1"}},
            "oci://registry.example.com/team-b/m",
        ),
        ({"namespace": "other"}, "s3://models/models/sentiment/1/"),
    ],
    ids=["source", "destination", "another-tenant"],
)
def test_a_location_outside_the_tenant_is_403_naming_it(
    local: Transfers, changes: dict[str, Any], location: str
) -> None:
    registry = InMemoryModelRegistry()
    with pytest.raises(Forbidden) as caught:
        handle(event_of(request(**changes)), registry=registry, tenancy=TENANTS, transfers=local)
    assert location in caught.value.message
    assert not registry.models  # nothing registered, nothing copied


def test_a_request_naming_no_tenant_gets_the_owner_of_its_source(local: Transfers) -> None:
    (reply,) = handle(
        event_of(request(namespace=None)),
        registry=InMemoryModelRegistry(),
        tenancy=TENANTS,
        transfers=local,
    )
    assert isinstance(reply.data, ModelRegistered) and reply.data.namespace == "ml"
    with pytest.raises(Forbidden, match="s3://nobody"):
        handle(
            event_of(
                request(namespace=None, source={"type": "s3", "bucket": "nobody", "key": "m"})
            ),
            registry=InMemoryModelRegistry(),
            tenancy=TENANTS,
            transfers=local,
        )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"source": {"type": "s3", "bucket": "models"}}, "source.key"),
        ({"source": {"type": "uri", "uri": "file:///etc/passwd"}}, "source.uri"),
        ({"source": {"type": "local", "path": "/etc"}}, "source.type"),
        (
            {"destination": {"type": "s3", "bucket": "b", "key": "k", "secret": "x"}},
            "destination.secret",
        ),
        ({"intent": "create_model", "model": {}}, "model.name"),
        ({"intent": "update_artifact"}, "artifact.id"),
        (  # a destination is a tag to push to: a digest cannot be pushed to
            {"destination": {"type": "oci", "uri": f"r.example/m:v1@sha256:{'ab' * 32}"}},
            "destination.uri",
        ),
        (
            {"destination": {"type": "oci", "uri": f"r.example/m@sha256:{'ab' * 32}"}},
            "destination.uri",
        ),
    ],
)
def test_bad_data_is_400_naming_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(BadRequest) as caught:
        request(**changes)
    assert caught.value.as_json()["details"]["field"] == field


@pytest.mark.parametrize(
    "uri",
    [f"r.example/m:v1@sha256:{'ab' * 32}", f"oci://r.example/m@sha256:{'ab' * 32}",
     f"r.example/m@sha512:{'ab' * 64}", "r.example/m:v1"],
)  # fmt: skip
def test_the_event_and_the_job_refuse_the_same_destinations_for_the_same_reason(uri: str) -> None:
    """One rule (events.model.destination_refusal): the function's destination.uri and the
    Job's MODEL_SYNC_DESTINATION_OCI_URI are refused alike, saying the same."""
    from modelhooks.adapters.transfer.config import _pushable  # the Job's check of the setting
    from modelhooks.core.errors import ConfigError

    event: str | None = None
    try:
        request(destination={"type": "oci", "uri": uri})
    except BadRequest as exc:
        event = exc.message
    job: str | None = None
    try:
        _pushable(uri)
    except ConfigError as exc:
        job = exc.message
    assert (event is None) == (job is None) == uri.endswith(":v1")
    if event and job:
        assert event.partition(f"{uri!r}")[2] == job.partition(f"{uri!r}")[2] != ""


def test_a_malformed_oci_reference_is_400(local: Transfers) -> None:
    bad = request(destination={"type": "oci", "uri": "Registry.example.com/UPPER case"})
    with pytest.raises(BadRequest):
        handle(event_of(bad), registry=InMemoryModelRegistry(), tenancy=Tenancy(), transfers=local)


@pytest.mark.parametrize(
    "changes",
    [
        {"source": {"type": "uri", "uri": "http://127.0.0.1:8080/model.tar.gz"}},
        {"source": {"type": "uri", "uri": "http://169.254.169.254/latest/meta-data/"}},
        {"source": {"type": "uri", "uri": "https://metadata.google.internal/m.zip"}},
        {"destination": {"type": "oci", "uri": "localhost:5000/ml/m:1"}},
        {"source": {"type": "oci", "uri": "10.0.0.7/ml/m:1"}},
    ],
    ids=["loopback", "link-local", "metadata", "oci-localhost", "oci-private"],
)
def test_a_host_the_event_names_is_refused_before_anything_moves(
    local: Transfers, changes: dict[str, Any]
) -> None:
    registry = InMemoryModelRegistry()
    with pytest.raises(Forbidden, match=r"loopback|non-public|metadata|local") as caught:
        handle(event_of(request(**changes)), registry=registry, tenancy=Tenancy(), transfers=local)
    assert "allowed_hosts" in caught.value.as_json()["details"]["hint"]
    assert not registry.models and not registry.artifacts  # nothing registered


def test_store_allow_local_targets_lets_a_local_host_through(local: Transfers) -> None:
    allowed = Stores({}, local_root=Path("/nonexistent"), allow_local_targets=True)
    local_oci = request(destination={"type": "oci", "uri": "127.0.0.1:5000/ml/m:1"})
    (reply,) = handle(
        event_of(local_oci),
        registry=InMemoryModelRegistry(),
        tenancy=Tenancy(),
        transfers=local,
        stores=allowed,
    )
    assert isinstance(reply.data, ModelRegistered)


def test_the_function_starts_without_the_copy_s_modules() -> None:
    """The handler's process imports `request` at start-up; the configuration (argparse)
    and the copy (its clients, ctypes) come with the first transfer, not before."""
    import subprocess
    import sys

    code = (
        "import sys; from modelhooks.bootstrap import build; from modelhooks.handlers import transfer; "
        "from modelhooks.adapters.transfer.request import Transfers; Transfers(); "
        "late = {'modelhooks.adapters.transfer.config', 'modelhooks.adapters.transfer.run', "
        "'modelhooks.adapters.transfer.files', 'ctypes'} & set(sys.modules); "
        "assert not late, sorted(late); "
        "from modelhooks.adapters.transfer import resolve, transfer, write_termination_message"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "uri",
    [
        "https://h.example:port/m.bin",  # http.client's InvalidURL when the request was made
        "https://h.example:99999/m.bin",
        "https://h.example:-1/m.bin",  # getaddrinfo: Unavailable, retried for good
        "https://h.example/a b.bin",
        "https://h.example/m\x7f.bin",
        "https://h.example/mod\u00e8le.bin",  # UnicodeEncodeError
        "https://user:secret@h.example/m.bin",
    ],
)
def test_a_source_uri_no_request_can_carry_is_a_bad_request(uri: str) -> None:
    """Each was a ValueError (a 500) or a transient failure once the copy began."""
    from modelhooks.adapters.transfer.uri import UriSource

    with pytest.raises(BadRequest, match="source uri"):
        UriSource(uri)


def test_a_redelivery_after_the_source_is_gone_answers_as_the_first_and_keeps_it_live(
    local: Transfers, model_dir: Path
) -> None:
    """At least once: the same request delivered again after it took effect (its answer
    lost: a crash before the delivery log's record, Pub/Sub's ack deadline passed during a
    long copy, another instance) once the source is gone (a staging bucket emptied after
    the copy) answers as the first time. It copied again, found no source, and left the
    artifact it had made LIVE ABANDONED with a 404, for good (a 404 is never redelivered)."""
    import shutil

    registry = InMemoryModelRegistry()
    args = {"registry": registry, "tenancy": Tenancy(), "transfers": local}
    (first,) = handle(event_of(request()), **args)
    shutil.rmtree(model_dir)
    (again,) = handle(event_of(request()), **args)
    assert (again.id, again.data) == (first.id, first.data)
    (artifact,) = registry.artifacts.values()
    assert artifact.state == ArtifactState.LIVE
    assert isinstance(first.data, ModelRegistered) and artifact.digest == first.data.digest
    with pytest.raises(NotFound):  # another request for the same artifact copies anew
        handle(CanonicalEvent.new(request(), source="/test", id="t-2"), **args)


@pytest.mark.parametrize(
    ("host", "sent"),
    [("registry.example.com", True), ("evil.example", False), ("registry.example.com:8443", False)],
)
def test_the_process_s_registry_credentials_go_to_their_registry_alone(
    tmp_path: Path, host: str, sent: bool
) -> None:
    """The event names the destination's host; MODEL_SYNC_DESTINATION_OCI_USERNAME and
    _PASSWORD, configured for MODEL_SYNC_DESTINATION_OCI_REGISTRY, went to whatever host that
    was (a registry answering 401 Basic got them): they go to their registry alone now, any
    other is asked anonymously (a .dockerconfigjson already gave only the entry of the host)."""
    from modelhooks.adapters.transfer.run import build_destination

    env = {
        **ENV,
        "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state"),
        "MODEL_SYNC_DESTINATION_OCI_USERNAME": "robot",
        "MODEL_SYNC_DESTINATION_OCI_PASSWORD": "s3cret",
        "MODEL_SYNC_DESTINATION_OCI_REGISTRY": "registry.example.com",
    }
    destination = {"type": "oci", "uri": f"{host}/models/m:1", "format": "artifact"}
    cfg = Transfers(env=env).config(request(destination=destination))
    credentials = build_destination(cfg).client.auth.credentials
    assert (credentials is not None) is sent
    if sent:
        assert (credentials.username, credentials.password) == ("robot", "s3cret")


def test_the_base_image_an_event_names_gets_no_credentials_either(tmp_path: Path) -> None:
    from modelhooks.adapters.transfer.run import build_destination

    env = {
        **ENV,
        "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state"),
        "MODEL_SYNC_DESTINATION_OCI_USERNAME": "robot",
        "MODEL_SYNC_DESTINATION_OCI_PASSWORD": "s3cret",
        "MODEL_SYNC_DESTINATION_OCI_REGISTRY": "registry.example.com",
    }
    destination = {
        "type": "oci",
        "uri": "registry.example.com/models/m:1",
        "format": "image",
        "base_image": "evil.example/python:3",
    }
    end = build_destination(Transfers(env=env).config(request(destination=destination)))
    assert end.client.auth.credentials is not None
    assert end.base is not None and end.base[0].auth.credentials is None


def test_an_older_request_delivered_after_a_newer_one_took_effect_moves_nothing(
    tmp_path: Path,
) -> None:
    """Two requests for the same artifact from two sources (the model fixed and sent
    again); the older delivered late, after the newer took effect (at least once,
    unordered): it copied its source over and took the artifact back to its content, so
    the end depended on the order. Now it is moot (204), the artifact keeps the newer's."""
    from datetime import UTC, datetime, timedelta

    from modelhooks.core.function import Skip

    for name, weights in (("a", b"\x01" * 5000), ("b", b"\x02" * 5000)):
        (tmp_path / "src" / name).mkdir(parents=True)
        (tmp_path / "src" / name / "w.bin").write_bytes(weights)
    by_source = Transfers(
        env={**ENV, "MODEL_SYNC_STORAGE_PATH": str(tmp_path / "state")},
        ends=lambda cfg: (
            LocalEnd(str(tmp_path / "src" / cfg.get("source_aws_key").strip("/"))),
            LocalEnd(str(tmp_path / "out")),
        ),
    )
    registry = InMemoryModelRegistry()
    args = {"registry": registry, "tenancy": Tenancy(), "transfers": by_source}
    t0 = datetime(2026, 11, 1, tzinfo=UTC)

    def sent(key: str, minutes: int) -> CanonicalEvent:
        data = request(source={"type": "s3", "bucket": "staging", "key": f"{key}/"})
        return CanonicalEvent.new(data, source="/test", id=f"t-{key}").replace(
            time=t0 + timedelta(minutes=minutes)
        )

    (newer,) = handle(sent("b", 5), **args)
    with pytest.raises(Skip, match="newer request"):
        handle(sent("a", 1), **args)
    (artifact,) = registry.artifacts.values()
    assert isinstance(newer.data, ModelRegistered) and artifact.digest == newer.data.digest
    assert (tmp_path / "out" / "w.bin").read_bytes() == b"\x02" * 5000
