"""`modelhooks transfer`'s configuration: the async-upload job's table, precedence args >
env > credential files > defaults exactly as its README documents (a test per pair), the
credential files, the metadata directory, missing and unknown settings, the signing rule."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from modelhooks.adapters.transfer.config import OPTIONS, resolve
from modelhooks.cli import main
from modelhooks.core.errors import ConfigError

# a complete configuration (s3 → oci, update_artifact) as env, without the settings a test varies
BASE = {
    "MODEL_SYNC_SOURCE_AWS_BUCKET": "b",
    "MODEL_SYNC_SOURCE_AWS_KEY": "k",
    "MODEL_SYNC_SOURCE_AWS_ACCESS_KEY_ID": "id",
    "MODEL_SYNC_SOURCE_AWS_SECRET_ACCESS_KEY": "secret",
    "MODEL_SYNC_DESTINATION_OCI_URI": "quay.example/org/m:v1",
    "MODEL_SYNC_MODEL_ARTIFACT_ID": "3",
    "MODEL_SYNC_REGISTRY_SERVER_ADDRESS": "mr.example",
}


def s3_dir(tmp_path: Path, **files: str) -> Path:
    d = tmp_path / "s3-creds"
    d.mkdir(exist_ok=True)
    for name, value in files.items():
        (d / name).write_text(value + "\n")
    return d


# Kubeflow Model Registry's async-upload job: every variable and its argument, as its README
# (kubeflow/model-registry, jobs/async-upload) lists them; `` where it has no argument.
UPSTREAM = (
    ("MODEL_SYNC_SOURCE_TYPE", "--source-type"),
    ("MODEL_SYNC_SOURCE_S3_CREDENTIALS_PATH", "--source-s3-credentials-path"),
    ("MODEL_SYNC_SOURCE_OCI_CREDENTIALS_PATH", "--source-oci-credentials-path"),
    ("MODEL_SYNC_SOURCE_URI_CREDENTIALS_PATH", "--source-uri-credentials-path"),
    ("MODEL_SYNC_SOURCE_URI", "--source-uri"),
    ("MODEL_SYNC_SOURCE_AWS_BUCKET", "--source-aws-bucket"),
    ("MODEL_SYNC_SOURCE_AWS_KEY", "--source-aws-key"),
    ("MODEL_SYNC_SOURCE_AWS_REGION", "--source-aws-region"),
    ("MODEL_SYNC_SOURCE_AWS_ACCESS_KEY_ID", "--source-aws-access-key-id"),
    ("MODEL_SYNC_SOURCE_AWS_SECRET_ACCESS_KEY", "--source-aws-secret-access-key"),
    ("MODEL_SYNC_SOURCE_AWS_ENDPOINT", "--source-aws-endpoint"),
    ("MODEL_SYNC_SOURCE_OCI_URI", "--source-oci-uri"),
    ("MODEL_SYNC_SOURCE_OCI_REGISTRY", "--source-oci-registry"),
    ("MODEL_SYNC_SOURCE_OCI_USERNAME", "--source-oci-username"),
    ("MODEL_SYNC_SOURCE_OCI_PASSWORD", "--source-oci-password"),
    ("MODEL_SYNC_DESTINATION_TYPE", "--destination-type"),
    ("MODEL_SYNC_DESTINATION_S3_CREDENTIALS_PATH", "--destination-s3-credentials-path"),
    ("MODEL_SYNC_DESTINATION_OCI_CREDENTIALS_PATH", "--destination-oci-credentials-path"),
    ("MODEL_SYNC_DESTINATION_AWS_BUCKET", "--destination-aws-bucket"),
    ("MODEL_SYNC_DESTINATION_AWS_KEY", "--destination-aws-key"),
    ("MODEL_SYNC_DESTINATION_AWS_REGION", "--destination-aws-region"),
    ("MODEL_SYNC_DESTINATION_AWS_ACCESS_KEY_ID", "--destination-aws-access-key-id"),
    ("MODEL_SYNC_DESTINATION_AWS_SECRET_ACCESS_KEY", "--destination-aws-secret-access-key"),
    ("MODEL_SYNC_DESTINATION_AWS_ENDPOINT", "--destination-aws-endpoint"),
    ("MODEL_SYNC_DESTINATION_OCI_URI", "--destination-oci-uri"),
    ("MODEL_SYNC_DESTINATION_OCI_REGISTRY", "--destination-oci-registry"),
    ("MODEL_SYNC_DESTINATION_OCI_USERNAME", "--destination-oci-username"),
    ("MODEL_SYNC_DESTINATION_OCI_PASSWORD", "--destination-oci-password"),
    ("MODEL_SYNC_DESTINATION_OCI_BASE_IMAGE", "--destination-oci-base-image"),
    ("MODEL_SYNC_DESTINATION_OCI_ENABLE_TLS_VERIFY", "--destination-oci-enable-tls-verify"),
    ("MODEL_SYNC_MODEL_UPLOAD_INTENT", "--model-upload-intent"),
    ("MODEL_SYNC_MODEL_ID", "--model-id"),
    ("MODEL_SYNC_MODEL_VERSION_ID", "--model-version-id"),
    ("MODEL_SYNC_MODEL_ARTIFACT_ID", "--model-artifact-id"),
    ("MODEL_SYNC_METADATA_CONFIGMAP_PATH", ""),
    ("MODEL_SYNC_STORAGE_PATH", "--storage-path"),
    ("MODEL_SYNC_REGISTRY_SERVER_ADDRESS", "--registry-server-address"),
    ("MODEL_SYNC_REGISTRY_PORT", "--registry-port"),
    ("MODEL_SYNC_REGISTRY_IS_SECURE", "--registry-is-secure"),
    ("MODEL_SYNC_REGISTRY_AUTHOR", "--registry-author"),
    ("MODEL_SYNC_REGISTRY_USER_TOKEN", "--registry-user-token"),
    ("MODEL_SYNC_REGISTRY_USER_TOKEN_ENVVAR", "--registry-user-token-envvar"),
    ("MODEL_SYNC_REGISTRY_CUSTOM_CA", "--registry-custom-ca"),
    ("MODEL_SYNC_REGISTRY_CUSTOM_CA_ENVVAR", "--registry-custom-ca-envvar"),
    ("MODEL_SYNC_REGISTRY_LOG_LEVEL", "--registry-log-level"),
    ("MODEL_SYNC_SIGN", "--sign"),
    ("MODEL_SYNC_SIGNING_IDENTITY_TOKEN_PATH", "--signing-identity-token-path"),
)


def test_every_row_of_the_table_is_an_env_and_an_arg() -> None:
    names = {o.env for o in OPTIONS}
    flags = {o.flag for o in OPTIONS}
    for env, arg in UPSTREAM:
        assert env in names
        if arg:
            assert arg in flags


def test_defaults_are_upstreams() -> None:
    cfg = resolve([], BASE)
    assert (cfg.source.kind, cfg.destination.kind, cfg.intent) == ("s3", "oci", "update_artifact")
    assert cfg.get("destination_oci_base_image") == "busybox:latest"
    assert cfg.get("storage_path") == "/tmp/model-sync"
    assert cfg.get("registry_port") == "443"
    assert (
        cfg.get("signing_identity_token_path")
        == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )
    assert cfg.origins["registry_port"] == "default"


def test_arg_beats_env() -> None:
    cfg = resolve(
        ["--source-aws-bucket", "from-arg"], {**BASE, "MODEL_SYNC_SOURCE_AWS_BUCKET": "from-env"}
    )
    assert cfg.source.get("aws_bucket") == "from-arg"
    assert cfg.origins["source_aws_bucket"] == "arg"


def test_arg_beats_credential_file(tmp_path: Path) -> None:
    creds = s3_dir(tmp_path, AWS_ACCESS_KEY_ID="from-file")
    env = {k: v for k, v in BASE.items() if k != "MODEL_SYNC_SOURCE_AWS_ACCESS_KEY_ID"}
    cfg = resolve(
        ["--source-aws-access-key-id", "from-arg", "--source-s3-credentials-path", str(creds)], env
    )
    assert cfg.source.get("aws_access_key_id") == "from-arg"


def test_arg_beats_default() -> None:
    cfg = resolve(["--registry-port", "8443"], BASE)
    assert cfg.get("registry_port") == "8443"


def test_env_beats_credential_file(tmp_path: Path) -> None:
    # upstream's code lets the file win here; its README (and we) say env first
    creds = s3_dir(tmp_path, AWS_BUCKET="from-file", AWS_SECRET_ACCESS_KEY="file-secret")
    env = {**BASE, "MODEL_SYNC_SOURCE_S3_CREDENTIALS_PATH": str(creds)}
    cfg = resolve([], env)
    assert cfg.source.get("aws_bucket") == "b"
    assert cfg.source.get("aws_secret_access_key") == "secret"


def test_env_beats_default() -> None:
    cfg = resolve([], {**BASE, "MODEL_SYNC_DESTINATION_OCI_BASE_IMAGE": "ubi9:latest"})
    assert cfg.get("destination_oci_base_image") == "ubi9:latest"
    assert cfg.origins["destination_oci_base_image"] == "env"


def test_credential_file_beats_default(tmp_path: Path) -> None:
    creds = s3_dir(tmp_path, AWS_DEFAULT_REGION="eu-west-1", AWS_S3_ENDPOINT="http://minio:9000")
    cfg = resolve(
        [
            "--destination-type",
            "s3",
            "--destination-s3-credentials-path",
            str(creds),
            "--destination-aws-bucket",
            "o",
            "--destination-aws-key",
            "p",
            "--destination-aws-access-key-id",
            "i",
            "--destination-aws-secret-access-key",
            "s",
        ],
        BASE,
    )
    assert cfg.destination.get("aws_region") == "eu-west-1"
    assert cfg.destination.get("aws_endpoint") == "http://minio:9000"
    assert cfg.origins["destination_aws_region"] == "file"


def test_s3_credentials_directory_alone_satisfies_the_required_settings(tmp_path: Path) -> None:
    creds = s3_dir(
        tmp_path,
        AWS_ACCESS_KEY_ID="ak",
        AWS_SECRET_ACCESS_KEY="sk",
        AWS_S3_BUCKET="bk",
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL="http://minio:9000",
    )
    env = {k: v for k, v in BASE.items() if "SOURCE_AWS" not in k or k.endswith("AWS_KEY")}
    cfg = resolve(["--source-s3-credentials-path", str(creds)], env)
    assert (cfg.source.get("aws_bucket"), cfg.source.get("aws_access_key_id")) == ("bk", "ak")
    assert cfg.source.get("aws_secret_access_key") == "sk"


def test_dockerconfigjson_for_the_named_registry(tmp_path: Path) -> None:
    auth = base64.b64encode(b"robot:s3cr:et").decode()
    other = base64.b64encode(b"x:y").decode()
    file = tmp_path / ".dockerconfigjson"
    file.write_text(
        json.dumps({"auths": {"quay.example": {"auth": auth}, "other": {"auth": other}}})
    )
    cfg = resolve(["--destination-oci-credentials-path", str(tmp_path)], BASE)
    assert cfg.get("destination_oci_username") == "robot"
    assert cfg.get("destination_oci_password") == "s3cr:et"  # a colon in a password survives
    # args beat the file's entry
    cfg = resolve(
        ["--destination-oci-credentials-path", str(file), "--destination-oci-password", "p"], BASE
    )
    assert (cfg.get("destination_oci_username"), cfg.get("destination_oci_password")) == (
        "robot",
        "p",
    )


def test_uri_file(tmp_path: Path) -> None:
    (tmp_path / "URI").write_text("https://models.example/bert.tar.gz\n")
    cfg = resolve(["--source-type", "uri", "--source-uri-credentials-path", str(tmp_path)], BASE)
    assert cfg.get("source_uri") == "https://models.example/bert.tar.gz"
    cfg = resolve(
        [
            "--source-type",
            "uri",
            "--source-uri-credentials-path",
            str(tmp_path),
            "--source-uri",
            "https://x.example/a.zip",
        ],
        BASE,
    )
    assert cfg.get("source_uri") == "https://x.example/a.zip"


def test_missing_settings_are_one_error_naming_each_and_where(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(["--model-upload-intent", "create_version"], {})
    text = err.value.message
    for needed in (
        "source_aws_bucket",
        "source_aws_access_key_id",
        "destination_oci_uri",
        "model_id",
        "ModelVersion.name",
    ):
        assert needed in text
    assert "registry_server_address" not in text  # without one: the modelhooks registry
    assert "AWS_ACCESS_KEY_ID in MODEL_SYNC_SOURCE_S3_CREDENTIALS_PATH" in text
    assert "--model-id, MODEL_SYNC_MODEL_ID" in text
    assert "RegisteredModel.name" not in text  # create_version names an existing model


def test_create_model_needs_the_names_from_the_metadata_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"RegisteredModel\.name"):
        resolve(["--model-upload-intent", "create_model"], BASE)
    meta = tmp_path / "meta"
    meta.mkdir()
    (meta / "RegisteredModel.name").write_text("sentiment")
    (meta / "RegisteredModel.custom_properties").write_text(
        '{"project": "sentiment-analysis", "team": "nlp"}'
    )
    (meta / "ModelVersion.name").write_text("v1")
    (meta / "ModelVersion.custom_properties").write_text('{"accuracy": 0.95, "f1_score": 0.93}')
    (meta / "ModelArtifact.model_format_name").write_text("onnx")
    (meta / "..data").mkdir()  # a mounted ConfigMap's own entries are not metadata
    cfg = resolve(
        [],
        {
            **BASE,
            "MODEL_SYNC_MODEL_UPLOAD_INTENT": "create_model",
            "MODEL_SYNC_METADATA_CONFIGMAP_PATH": str(meta),
        },
    )
    assert cfg.metadata.of("RegisteredModel")["custom_properties"] == {
        "project": "sentiment-analysis",
        "team": "nlp",
    }
    assert cfg.metadata.of("ModelVersion")["custom_properties"]["accuracy"] == 0.95
    assert cfg.metadata.of("ModelArtifact")["model_format_name"] == "onnx"
    (meta / "ModelVersion.custom_properties").write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        resolve(
            [],
            {
                **BASE,
                "MODEL_SYNC_MODEL_UPLOAD_INTENT": "create_model",
                "MODEL_SYNC_METADATA_CONFIGMAP_PATH": str(meta),
            },
        )


@pytest.mark.parametrize(
    ("setting", "value", "allowed"),
    [
        ("--source-type", "ftp", "s3, gcs, oci, uri, local, pvc"),
        ("--destination-type", "uri", "s3, gcs, oci, local, pvc"),
        ("--model-upload-intent", "create", "update_artifact, create_model, create_version"),
        ("--destination-oci-format", "zip", "image, artifact"),
    ],
)
def test_unknown_types_list_the_allowed_values(setting: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve([setting, value], BASE)
    assert allowed in err.value.message and repr(value) in err.value.message


SIGSTORE = {
    "SIGSTORE_TUF_URL": "http://tuf",
    "SIGSTORE_FULCIO_URL": "http://fulcio",
    "SIGSTORE_REKOR_URL": "http://rekor",
}


@pytest.mark.parametrize(
    ("args", "sigstore", "sign", "warns"),
    [
        ([], SIGSTORE, True, False),
        ([], {}, False, False),
        ([], {"SIGSTORE_FULCIO_URL": "http://fulcio"}, False, True),
        (["--sign", "false"], SIGSTORE, False, False),
        (["--sign", "true"], {}, True, False),
        (["--sign", "false"], {"SIGSTORE_REKOR_URL": "x"}, False, False),
    ],
)
def test_signing_rule(args: list[str], sigstore: dict[str, str], sign: bool, warns: bool) -> None:
    cfg = resolve(args, {**BASE, **sigstore})
    assert cfg.sign is sign
    assert bool(cfg.sign_warning) is warns
    if warns:
        assert "SIGSTORE_TUF_URL" in cfg.sign_warning and "SIGSTORE_REKOR_URL" in cfg.sign_warning


def test_sign_env_and_a_bad_boolean() -> None:
    assert resolve([], {**BASE, **SIGSTORE, "MODEL_SYNC_SIGN": "False"}).sign is False
    with pytest.raises(ConfigError, match="MODEL_SYNC_SIGN"):
        resolve(["--sign", "maybe"], BASE)


def test_cli_exit_status_and_one_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["transfer", "--source-type", "s3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config_error: transfer is missing")
    assert "Traceback" not in err


def test_the_registry_is_reached_as_upstreams_client_reaches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelhooks.cli.transfer import _registry

    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("MY_TOKEN", "t0ken")
    cases = [
        ({"MODEL_SYNC_REGISTRY_SERVER_ADDRESS": "mr.example"}, "https://mr.example:443"),
        (
            {
                "MODEL_SYNC_REGISTRY_SERVER_ADDRESS": "http://mr.svc",
                "MODEL_SYNC_REGISTRY_PORT": "8080",
            },
            "http://mr.svc:8080",
        ),
        (
            {
                "MODEL_SYNC_REGISTRY_SERVER_ADDRESS": "mr.svc",
                "MODEL_SYNC_REGISTRY_IS_SECURE": "false",
            },
            "http://mr.svc:443",
        ),
        (
            {"MODEL_SYNC_REGISTRY_SERVER_ADDRESS": "https://mr.example:9443"},
            "https://mr.example:9443",
        ),
    ]
    for env, url in cases:
        registry = _registry(resolve([], {**BASE, **env}))
        assert registry.api_url == url + "/api/model_registry/v1alpha3"
        registry.close()
    cfg = resolve(
        ["--registry-user-token-envvar", "MY_TOKEN", "--registry-custom-ca", str(ca)], BASE
    )
    registry = _registry(cfg)
    assert registry._headers["Authorization"] == "Bearer t0ken"
    assert registry._http._tls == {"cadata": ca.read_text()}  # the path's PEM
    registry.close()


def test_the_drop_ins_registry_first_else_the_modelhooks_registry_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
    from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
    from modelhooks.cli.transfer import _registry
    from modelhooks.core.settings import load_settings

    env = {"MODELHOOKS_REGISTRY_BACKEND": "kubeflow", "MODELHOOKS_REGISTRY_URL": "http://x:1"}
    ours = load_settings(env=env)
    drop_in = _registry(resolve([], BASE), ours)  # MODEL_SYNC_REGISTRY_SERVER_ADDRESS wins
    assert isinstance(drop_in, KubeflowModelRegistry)
    assert drop_in.api_url.startswith("https://mr.example:443/")
    drop_in.close()
    assert capsys.readouterr().err == ""

    without = {k: v for k, v in BASE.items() if k != "MODEL_SYNC_REGISTRY_SERVER_ADDRESS"}
    chosen = _registry(resolve([], without), ours)
    assert isinstance(chosen, KubeflowModelRegistry) and chosen.api_url.startswith("http://x:1/")
    chosen.close()
    assert "registering in the kubeflow registry at http://x:1" in capsys.readouterr().err
    default = _registry(resolve([], without), load_settings(env={"MODELHOOKS_HOME": str(tmp_path)}))
    assert isinstance(default, SqliteModelRegistry) and default.path == tmp_path / "registry.db"
    default.close()
    assert f"sqlite registry at {tmp_path / 'registry.db'}" in capsys.readouterr().err


def test_a_drop_in_run_does_not_read_the_modelhooks_registry_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.bin").write_bytes(b"w")
    monkeypatch.setenv("MODELHOOKS_REGISTRY_BACKEND", "nonsense")  # not ours to choose here
    args = ["--source-type", "local", "--source-path", str(tmp_path / "m")]
    args += ["--destination-type", "local", "--destination-path", str(tmp_path / "out")]
    args += ["--model-artifact-id", "1", "--storage-path", str(tmp_path / "state")]
    args += ["--registry-server-address", "http://127.0.0.1:9", "--registry-port", "9"]
    assert main(["transfer", *args]) == 3  # the drop-in's registry did not answer
    err = capsys.readouterr().err
    assert "127.0.0.1:9" in err and "MODELHOOKS_REGISTRY_BACKEND" not in err


def test_metadata_custom_properties_keep_their_json_types(tmp_path: Path) -> None:
    from modelhooks.adapters.transfer.register import begin
    from modelhooks.core.errors import BadRequest
    from modelhooks.core.records import Typed
    from tests.fakes.memory_registry import InMemoryModelRegistry

    meta = tmp_path / "meta"
    meta.mkdir()
    (meta / "RegisteredModel.name").write_text("typed")
    (meta / "ModelVersion.name").write_text("v1")
    custom = '{"accuracy": 0.95, "epochs": 3, "tuned": false, "tags": ["a"], "gone": null}'
    (meta / "ModelVersion.custom_properties").write_text(custom)
    cfg = resolve(
        ["--model-upload-intent", "create_model", "--metadata-configmap-path", str(meta)], BASE
    )
    registry = InMemoryModelRegistry()
    target = begin(registry, cfg, "s3://b/typed/v1")
    version = registry.get_version(target.model_id, "v1")
    assert version is not None
    props = {k: v for k, v in version.custom_properties.items() if not k.startswith("kubeflow.")}
    assert props == {"accuracy": "0.95", "epochs": "3", "tuned": "false", "tags": '["a"]'}
    assert all(isinstance(v, Typed) for v in props.values())  # "gone" (null): left out
    assert [type(v.value) for v in props.values()] == [float, int, bool, list]  # type: ignore[attr-defined]

    (meta / "ModelVersion.custom_properties").write_text('{"loss": NaN}')
    cfg = resolve(
        ["--model-upload-intent", "create_model", "--metadata-configmap-path", str(meta)], BASE
    )
    with pytest.raises(BadRequest, match="loss"):
        begin(InMemoryModelRegistry(), cfg, "s3://b/typed/v1")
