"""The configuration of `modelhooks transfer`: Kubeflow Model Registry's async-upload job's,
accepted unchanged (every MODEL_SYNC_* variable and `--arg`, the credential files, the
metadata ConfigMap directory), with the documented precedence:

    command-line args > environment > credential files > defaults

(upstream's own code lets the credential files override args; we follow its README).

Our additions, in the same style: source and destination types `gcs` and `local` (`pvc` is
the same as `local`), `MODEL_SYNC_{SOURCE,DESTINATION}_PATH` (a local/PVC directory),
`MODEL_SYNC_{SOURCE,DESTINATION}_GCS_BUCKET` / `_GCS_KEY`, `MODEL_SYNC_SOURCE_URI_SHA256`
(the archive's checksum), `MODEL_SYNC_SOURCE_URI_ALLOW_LOCAL` (loopback / link-local URIs),
`MODEL_SYNC_DESTINATION_OCI_FORMAT` (`image`: the model layered on the base image, as
upstream; `artifact`: one plain layer per file), `MODEL_SYNC_MODEL_NAME` / `_VERSION_NAME`
(instead of the metadata directory), `MODEL_SYNC_TERMINATION_MESSAGE_PATH`.

>>> cfg = resolve(["--source-type", "local", "--source-path", "/m", "--destination-type",
...     "local", "--destination-path", "/out", "--model-artifact-id", "7"], env={})
>>> cfg.source.kind, cfg.intent, cfg.model.artifact_id
('local', 'update_artifact', '7')
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelhooks.core.errors import ConfigError
from modelhooks.events.model import destination_refusal

__all__ = [
    "DEFAULT_TOKEN_PATH",
    "DESTINATION_TYPES",
    "INTENTS",
    "OPTIONS",
    "SOURCE_TYPES",
    "Endpoint",
    "Metadata",
    "ModelIds",
    "Option",
    "TransferConfig",
    "add_arguments",
    "resolve",
]

SOURCE_TYPES = ("s3", "gcs", "oci", "uri", "local", "pvc")
DESTINATION_TYPES = ("s3", "gcs", "oci", "local", "pvc")
INTENTS = ("update_artifact", "create_model", "create_version")
OCI_FORMATS = ("image", "artifact")
DEFAULT_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"
PREFIX = "MODEL_SYNC_"


@dataclass(frozen=True)
class Option:
    """One row of the table: `name` is the env variable without MODEL_SYNC_, lower-cased."""

    name: str
    default: str | None = None
    help: str = ""

    @property
    def env(self) -> str:
        return PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _side(side: str) -> list[Option]:
    rows = [
        Option(f"{side}_s3_credentials_path", help="a directory of AWS_* files (a Secret)"),
        Option(f"{side}_oci_credentials_path", help="a .dockerconfigjson file (or its dir)"),
        *(
            Option(f"{side}_aws_{n}")
            for n in ("bucket", "key", "region", "access_key_id", "secret_access_key", "endpoint")
        ),
        *(Option(f"{side}_oci_{n}") for n in ("uri", "registry", "username", "password")),
        Option(f"{side}_gcs_bucket"),
        Option(f"{side}_gcs_key"),
        Option(f"{side}_path", help="a local or PVC directory"),
    ]
    return rows


OPTIONS: tuple[Option, ...] = (
    Option("source_type", "s3", f"one of {', '.join(SOURCE_TYPES)}"),
    *_side("source"),
    Option("source_uri_credentials_path", help="a file holding the URI (or a dir with URI)"),
    Option("source_uri", help="http(s) URL of a file or a zip/tar archive"),
    Option("source_uri_sha256", help="the expected sha256 of what source_uri serves"),
    Option("source_uri_allow_local", "false", "allow loopback/link-local/private addresses"),
    Option("destination_type", "oci", f"one of {', '.join(DESTINATION_TYPES)}"),
    *_side("destination"),
    Option("destination_oci_base_image", "busybox:latest"),
    Option("destination_oci_enable_tls_verify", "true"),
    Option("destination_oci_format", "image", "image (on the base image) or artifact"),
    Option("model_upload_intent", "update_artifact", f"one of {', '.join(INTENTS)}"),
    Option("model_id"),
    Option("model_version_id"),
    Option("model_artifact_id"),
    Option("model_name", help="the RegisteredModel name (else from the metadata dir)"),
    Option("model_version_name", help="the ModelVersion name (else from the metadata dir)"),
    Option("metadata_configmap_path", help="a mounted ConfigMap: one file per key"),
    Option("storage_path", "/tmp/model-sync", "small state for resuming (never the model)"),
    Option("registry_server_address"),
    Option("registry_port", "443"),
    Option("registry_is_secure", "True"),
    Option("registry_author"),
    Option("registry_user_token"),
    Option("registry_user_token_envvar"),
    Option("registry_custom_ca"),
    Option("registry_custom_ca_envvar"),
    Option("registry_log_level"),
    Option("sign", help="true/false; unset: on when SIGSTORE_{TUF,FULCIO,REKOR}_URL are set"),
    Option("signing_identity_token_path", DEFAULT_TOKEN_PATH),
    Option("signing_key", help="an EC private key (PEM): key signing instead of keyless"),
    Option("termination_message_path", "/dev/termination-log"),
)
_BY_NAME = {o.name: o for o in OPTIONS}

# credential files: (setting, file names in the S3 credentials directory, first found wins)
_S3_FILES = {
    "aws_access_key_id": ("AWS_ACCESS_KEY_ID",),
    "aws_secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "aws_region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "aws_endpoint": ("AWS_ENDPOINT_URL", "AWS_S3_ENDPOINT"),
    "aws_bucket": ("AWS_BUCKET", "AWS_S3_BUCKET"),
    "aws_key": ("AWS_KEY", "AWS_S3_KEY"),
}
_REQUIRED = {
    "s3": ("aws_bucket", "aws_key", "aws_access_key_id", "aws_secret_access_key"),
    "gcs": ("gcs_bucket",),
    "oci": ("oci_uri",),
    "local": ("path",),
    "pvc": ("path",),
}
_TRUE, _FALSE = {"1", "true", "t", "yes", "y", "on"}, {"0", "false", "f", "no", "n", "off"}


@dataclass(frozen=True)
class Endpoint:
    """A source or destination: `kind` and its settings (names without the side prefix)."""

    kind: str
    settings: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str, default: str = "") -> str:
        return self.settings.get(name) or default


@dataclass(frozen=True)
class ModelIds:
    model_id: str = ""
    version_id: str = ""
    artifact_id: str = ""


@dataclass(frozen=True)
class Metadata:
    """The metadata directory's values by kind: {"RegisteredModel": {"name": …}, …};
    `custom_properties` already parsed."""

    values: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def of(self, kind: str) -> Mapping[str, Any]:
        return self.values.get(kind, {})


@dataclass(frozen=True)
class TransferConfig:
    source: Endpoint
    destination: Endpoint
    intent: str
    model: ModelIds
    metadata: Metadata
    values: Mapping[str, str]  # every resolved setting by name (secrets included)
    origins: Mapping[str, str]  # where each came from: arg, env, file, default
    sign: bool
    sign_warning: str = ""
    # hosts the request names (the `transfer` function: an event names them): only public
    # addresses unless `allow_local` or listed in `allowed_hosts`; None: the CLI's rule
    # (OCI registries anywhere, a `uri` source as source_uri_allow_local says)
    allow_local: bool | None = None
    allowed_hosts: frozenset[str] = frozenset()

    def get(self, name: str) -> str:
        return self.values.get(name) or ""

    def flag(self, name: str) -> bool:
        return _bool(name, self.get(name))

    @property
    def storage_path(self) -> Path:
        return Path(self.get("storage_path"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option as `--flag` (default None: unset, so env and files can apply)."""
    for option in OPTIONS:
        parser.add_argument(
            option.flag,
            dest=option.name,
            default=None,
            metavar="VALUE",
            help=f"{option.help + '; ' if option.help else ''}env {option.env}"
            + (f", default {option.default}" if option.default else ""),
        )


def resolve(
    argv: Sequence[str] | Mapping[str, str | None],
    env: Mapping[str, str],
    *,
    metadata: Metadata | None = None,
) -> TransferConfig:
    """The configuration from args (a list, or the parsed {name: value}), `env` and the
    credential files they name. ConfigError listing every missing setting at once.
    `metadata` instead of the metadata directory. No registry setting is required: without
    MODEL_SYNC_REGISTRY_SERVER_ADDRESS the caller registers in the modelhooks registry."""
    if isinstance(argv, Mapping):
        args = {k: v for k, v in argv.items() if v is not None and k in _BY_NAME}
    else:
        parser = argparse.ArgumentParser(add_help=False)
        add_arguments(parser)
        args = {k: v for k, v in vars(parser.parse_args(list(argv))).items() if v is not None}
    values: dict[str, str] = {}
    origins: dict[str, str] = {}
    for option in OPTIONS:  # args > env
        if option.name in args:
            values[option.name], origins[option.name] = str(args[option.name]), "arg"
        elif env.get(option.env):
            values[option.name], origins[option.name] = env[option.env], "env"
    for name, value in _credential_files(values).items():  # > credential files
        if name not in values:
            values[name], origins[name] = value, "file"
    for option in OPTIONS:  # > defaults
        if option.name not in values and option.default is not None:
            values[option.name], origins[option.name] = option.default, "default"

    source, destination = _kind(values, "source"), _kind(values, "destination")
    intent = values["model_upload_intent"]
    _choice("model_upload_intent", intent, INTENTS)
    _choice("destination_oci_format", values["destination_oci_format"], OCI_FORMATS)
    for name in ("destination_oci_enable_tls_verify", "source_uri_allow_local"):
        _bool(name, values[name])
    if metadata is None:
        metadata = _metadata(values.get("metadata_configmap_path", ""))
    missing = _missing(values, source, destination, intent, metadata)
    if missing:
        raise ConfigError(
            f"transfer is missing {len(missing)} setting(s):\n  " + "\n  ".join(missing)
        )
    if destination == "oci":
        _pushable(values["destination_oci_uri"])
    sign, warning = _sign(values, env)
    return TransferConfig(
        source=_endpoint(values, "source", source),
        destination=_endpoint(values, "destination", destination),
        intent=intent,
        model=ModelIds(
            values.get("model_id", ""),
            values.get("model_version_id", ""),
            values.get("model_artifact_id", ""),
        ),
        metadata=metadata,
        values=values,
        origins=origins,
        sign=sign,
        sign_warning=warning,
    )


def _kind(values: Mapping[str, str], side: str) -> str:
    kind = values[f"{side}_type"].strip().lower()
    _choice(f"{side}_type", kind, SOURCE_TYPES if side == "source" else DESTINATION_TYPES)
    return "local" if kind == "pvc" else kind


def _choice(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        option = _BY_NAME[name]
        raise ConfigError(
            f"{option.env} / {option.flag}: {value!r} is not one of: {', '.join(allowed)}",
            setting=option.env,
            allowed=list(allowed),
        )


def _pushable(uri: str) -> None:
    """A destination reference is the tag the model is pushed under
    (events.model.destination_refusal, the event's rule)."""
    refused = destination_refusal(uri)
    if refused:
        raise ConfigError(
            f"MODEL_SYNC_DESTINATION_OCI_URI / --destination-oci-uri: {refused}",
            setting="MODEL_SYNC_DESTINATION_OCI_URI",
        )


def _bool(name: str, text: str) -> bool:
    if text.strip().lower() in _TRUE:
        return True
    if text.strip().lower() in _FALSE:
        return False
    option = _BY_NAME[name]
    raise ConfigError(f"{option.env} / {option.flag}: {text!r} is not true or false")


MAX_FILE_BYTES = 1 << 20  # a mounted Secret's or ConfigMap's key (Kubernetes: 1 MiB at most)


def _read(path: Path, setting: str) -> str:
    """A credential or metadata file's text, stripped; ConfigError naming it, never its
    bytes, when it is no UTF-8 text of at most MAX_FILE_BYTES (binary, it exited 70 with the
    codec's error quoting a byte of the credentials; /dev/zero was read without end)."""
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{setting}: {path} is over {MAX_FILE_BYTES} bytes: not one of its files")
    try:
        return data.decode().strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{setting}: {path} is not UTF-8 text") from None


def _credential_files(values: Mapping[str, str]) -> dict[str, str]:
    """Settings found in the credential files the settings name (never overriding those)."""
    found: dict[str, str] = {}
    for side in ("source", "destination"):
        s3_dir = values.get(f"{side}_s3_credentials_path")
        if s3_dir:
            directory = Path(s3_dir)
            if not directory.is_dir():
                raise ConfigError(
                    f"{_BY_NAME[side + '_s3_credentials_path'].env}: {s3_dir} is not a directory"
                )
            for name, files in _S3_FILES.items():
                hit = next((directory / f for f in files if (directory / f).is_file()), None)
                if hit is not None:
                    found[f"{side}_{name}"] = _read(
                        hit, _BY_NAME[side + "_s3_credentials_path"].env
                    )
        oci = values.get(f"{side}_oci_credentials_path")
        if oci:
            found.update(_docker_config(Path(oci), side, values))
    uri = values.get("source_uri_credentials_path")
    if uri:
        path = Path(uri)
        file = path / "URI" if path.is_dir() else path
        if not file.is_file():
            raise ConfigError(f"MODEL_SYNC_SOURCE_URI_CREDENTIALS_PATH: no URI file at {uri}")
        found["source_uri"] = _read(file, "MODEL_SYNC_SOURCE_URI_CREDENTIALS_PATH")
    return found


def _docker_config(path: Path, side: str, values: Mapping[str, str]) -> dict[str, str]:
    """Username and password for the side's registry from a `.dockerconfigjson`: the entry
    of MODEL_SYNC_<SIDE>_OCI_REGISTRY, else of the URI's host, else the only entry."""
    file = path / ".dockerconfigjson" if path.is_dir() else path
    setting = _BY_NAME[f"{side}_oci_credentials_path"].env
    try:
        auths = json.loads(file.read_text()).get("auths", {})
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{setting}: {file} is not a .dockerconfigjson: {exc}") from None
    if not isinstance(auths, dict) or not all(isinstance(e, dict) for e in auths.values()):
        raise ConfigError(f"{setting}: {file} is not a .dockerconfigjson: auths: not a mapping")
    registry = values.get(f"{side}_oci_registry") or _host(values.get(f"{side}_oci_uri", ""))
    entry = auths.get(registry) if registry else None
    if entry is None and len(auths) == 1 and not registry:
        registry, entry = next(iter(auths.items()))
    if entry is None:
        return {}
    found = {f"{side}_oci_registry": registry}
    user, password = entry.get("username", ""), entry.get("password", "")
    if entry.get("auth"):
        user, password = _basic(entry["auth"], f"{setting}: {file}: {registry}")
    if user:
        found[f"{side}_oci_username"] = user
    if password:
        found[f"{side}_oci_password"] = password
    return found


def _basic(auth: object, where: str) -> tuple[str, str]:
    """`user:password` of a .dockerconfigjson entry's `auth` (base64), ConfigError naming
    `where`, never the bytes: one that was not base64 of UTF-8 text (or not a string) was an
    internal error, exit 70, its message quoting a byte of the credentials."""
    try:
        if not isinstance(auth, str):
            raise TypeError
        user, _, password = base64.b64decode(auth).decode().partition(":")
    except (TypeError, ValueError):  # binascii.Error, UnicodeDecodeError
        raise ConfigError(f"{where}: auth is not base64 of user:password") from None
    return user, password


def _host(uri: str) -> str:
    rest = uri.split("://", 1)[-1]
    return rest.split("/", 1)[0] if "/" in rest else ""


def _metadata(directory: str) -> Metadata:
    if not directory:
        return Metadata()
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"MODEL_SYNC_METADATA_CONFIGMAP_PATH: {directory} is not a directory")
    values: dict[str, dict[str, Any]] = {}
    for file in sorted(root.iterdir()):
        kind, dot, key = file.name.partition(".")
        if not dot or not file.is_file() or kind.startswith(".."):
            continue  # a mounted ConfigMap's ..data links and timestamps
        text = _read(file, "MODEL_SYNC_METADATA_CONFIGMAP_PATH")
        if key == "custom_properties":
            try:
                value: Any = json.loads(text or "{}")
            except ValueError as exc:
                raise ConfigError(f"{file}: not JSON: {exc}") from None
            if not isinstance(value, dict):
                raise ConfigError(f"{file}: custom_properties must be a JSON object")
        else:
            value = text
        values.setdefault(kind, {})[key] = value
    return Metadata(values)


def _where(name: str) -> str:
    option = _BY_NAME[name]
    side, _, rest = name.partition("_")
    places = [option.flag, option.env]
    if rest.startswith("aws_") and rest.removeprefix("aws_") in {
        k.removeprefix("aws_") for k in _S3_FILES
    }:
        files = " or ".join(_S3_FILES[rest])
        places.append(f"{files} in {_BY_NAME[side + '_s3_credentials_path'].env}")
    elif rest in ("oci_username", "oci_password", "oci_registry"):
        places.append(f"{_BY_NAME[side + '_oci_credentials_path'].env} (.dockerconfigjson)")
    elif name == "source_uri":
        places.append("the file at MODEL_SYNC_SOURCE_URI_CREDENTIALS_PATH")
    return f"{name}: {', '.join(places)}"


def _missing(
    values: Mapping[str, str],
    source: str,
    destination: str,
    intent: str,
    metadata: Metadata,
) -> list[str]:
    need: list[str] = []
    for side, kind in (("source", source), ("destination", destination)):
        need += [f"{side}_{n}" for n in _REQUIRED.get(kind, ())]
    if source == "uri":
        need.append("source_uri")
    missing = [_where(n) for n in need if not values.get(n)]
    if intent == "update_artifact" and not values.get("model_artifact_id"):
        missing.append(_where("model_artifact_id") + " (intent update_artifact)")
    if intent == "create_version" and not values.get("model_id"):
        missing.append(_where("model_id") + " (intent create_version)")
    if intent in ("create_model", "create_version"):
        kinds = (
            ("ModelVersion",) if intent == "create_version" else ("RegisteredModel", "ModelVersion")
        )
        named = {"RegisteredModel": "model_name", "ModelVersion": "model_version_name"}
        for kind in kinds:
            if not (metadata.of(kind).get("name") or values.get(named[kind])):
                missing.append(
                    f"{kind}.name: a file {kind}.name in MODEL_SYNC_METADATA_CONFIGMAP_PATH, "
                    f"or {_BY_NAME[named[kind]].flag}, {_BY_NAME[named[kind]].env} "
                    f"(intent {intent})"
                )
    return missing


def _sign(values: Mapping[str, str], env: Mapping[str, str]) -> tuple[bool, str]:
    """The table's rule: --sign wins; else all three SIGSTORE_*_URL → on, none → off,
    some → off with a warning naming the absent ones."""
    if values.get("sign"):
        return _bool("sign", values["sign"]), ""
    names = ("SIGSTORE_TUF_URL", "SIGSTORE_FULCIO_URL", "SIGSTORE_REKOR_URL")
    absent = [n for n in names if not env.get(n)]
    if not absent:
        return True, ""
    if len(absent) == len(names):
        return False, ""
    return False, (
        f"not signing: {', '.join(absent)} not set (all three of {', '.join(names)} turn "
        "signing on; --sign true insists, --sign false silences this)"
    )


def _endpoint(values: Mapping[str, str], side: str, kind: str) -> Endpoint:
    prefix = f"{side}_"
    settings = {k.removeprefix(prefix): v for k, v in values.items() if k.startswith(prefix)}
    return Endpoint(kind, settings)
