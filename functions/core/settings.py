"""Typed settings, validated at start, from one place.

Precedence: command-line flags > environment > config file > defaults. Every setting has
an environment variable (`MODELHOOKS_<SECTION>_<NAME>`, a few platform ones such as
`K_SINK` too) and a flag (`--<section>-<name>`); the config file (YAML, `--config` /
`MODELHOOKS_CONFIG`, default `$MODELHOOKS_HOME/config.yaml` when it exists) uses the
nested names. A bad value fails start-up with a ConfigError naming the variable.

>>> load_settings(env={"MODELHOOKS_LAYOUT_MARKER": "READY"}).layout.marker
'READY'
"""

# No `from __future__ import annotations` here: msgspec then takes each section's field
# types as the objects they are instead of compiling them from strings when settings are
# first read (~3 ms of every process's start).

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta, field
from msgspec._core import Factory  # how a Struct keeps a default_factory

from modelhooks.core.errors import ConfigError
from modelhooks.events.layout import ObjectLayout, file_name_refusal

__all__ = ["SettingSpec", "Settings", "describe", "load_settings"]

PREFIX = "MODELHOOKS_"


def doc(
    text: str,
    *,
    env: str | None = None,
    flag: str | None = None,
    secret: bool = False,
    **limits: Any,
) -> Meta:
    """A setting's description (and, rarely, its own env var or flag name; `secret` ones
    are redacted wherever settings are shown)."""
    extra = {k: v for k, v in (("env", env), ("flag", flag), ("secret", secret)) if v}
    return Meta(description=text, extra=extra, **limits)


# The longest any duration setting may be (ten years): `inf`, or 1e20, reached a
# `timedelta`, a socket's timeout or a clock's deadline that overflows (OverflowError at
# the first delivery, not at start-up); a longer one is never anyway.
FOREVER = 10 * 365 * 24 * 3600


def seconds(text: str, **limits: Any) -> Meta:
    """A duration's description: a number of seconds, finite and at most FOREVER."""
    return doc(text, le=FOREVER, **limits)


def _http_url(name: str, value: str) -> None:
    """ValueError naming the field when `value`, set, is no http(s)://host URL: K_SINK
    `garbage` or a registry URL `mr:8080` was taken at start-up, and each event then failed
    (or was forwarded nowhere) at the first request."""
    try:
        parts = urlsplit(value)
        _ = parts.port  # ValueError: not a port
    except ValueError:
        parts = None
    bad = parts is None or parts.scheme not in ("http", "https") or not parts.hostname
    if value and (bad or any(c.isspace() or not c.isprintable() for c in value)):
        raise ValueError(f"{name}: {value!r} is not an http:// or https:// URL with a host")


# store.allowed_hosts' entries: a host name, an IPv4 or [IPv6] address, perhaps a port
_ALLOWED_HOST = (
    r"(?:[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?)*"
    r"\.?|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{1,5}))?"
)


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class RegistrySettings(_Section, frozen=True, kw_only=True):
    backend: Annotated[
        Literal["sqlite", "kubeflow", "kubernetes"],
        doc(
            "where registrations go: sqlite ($MODELHOOKS_HOME/registry.db), kubeflow "
            "(a Kubeflow Model Registry REST server) or kubernetes (RegisteredModel and "
            "ModelVersion resources, infra/k8s/crds, each model's in its owning namespace)"
        ),
    ] = "sqlite"
    url: Annotated[str, doc("Kubeflow Model Registry base URL (backend=kubeflow)")] = ""
    token: Annotated[
        str, doc("bearer token for the registry: a literal, env:NAME or file:PATH", secret=True)
    ] = ""
    ca: Annotated[
        str,
        doc(
            "CA certificate(s) the Kubeflow Model Registry's TLS is verified with (PEM): a "
            "literal, env:NAME or file:PATH; empty: the system's CAs (backend=kubeflow)"
        ),
    ] = ""
    connections: Annotated[
        int,
        doc(
            "the most requests this process has in flight to the Kubeflow Model Registry "
            "(backend=kubeflow; more wait their turn): its server keeps 2 idle PostgreSQL "
            "connections (Go's default, which v0.3 leaves) and PostgreSQL starts a backend "
            "process for every request beyond them; raise it for a registry far away",
            ge=1,
            le=64,
        ),
    ] = 2
    kubeconfig: Annotated[
        str,
        doc(
            "kubeconfig of the cluster that holds the registry (backend=kubernetes); empty: "
            "the pod's in-cluster config"
        ),
    ] = ""
    namespace: Annotated[
        str,
        doc(
            "the registry's shared namespace (backend=kubernetes): models with no owning "
            "namespace (or `default`) keep their records here, a team's in its namespace, "
            "RBAC in each the access; records carry modelhooks.dev/registry=<this>"
        ),
    ] = "modelhooks"

    def __post_init__(self) -> None:
        if self.backend == "kubeflow" and not self.url:
            raise ValueError("url: the kubeflow backend needs a URL (MODELHOOKS_REGISTRY_URL)")
        _http_url("url", self.url)
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", self.namespace):
            raise ValueError(f"namespace: {self.namespace!r} is not a Kubernetes namespace name")


class StoreSettings(_Section, frozen=True, kw_only=True):
    backend: Annotated[
        Literal["local", "cloud"],
        doc(
            "local: every bucket is a directory under $MODELHOOKS_HOME/store; "
            "cloud: gs:// goes to GCS and s3:// to S3"
        ),
    ] = "local"
    s3_endpoint_url: Annotated[str, doc("S3 endpoint (MinIO, other S3-compatible)")] = ""
    allow_local_targets: Annotated[
        bool,
        doc(
            "let URIs taken from events name any host, loopback, private and metadata "
            "addresses included (a registry on this machine, tests); off in production"
        ),
    ] = False
    allowed_hosts: Annotated[
        str,
        doc(
            "hosts (host or host:port, comma-separated) events may name even though they are "
            "private, e.g. an in-cluster registry: registry.ml.svc:5000,10.0.0.7:5000"
        ),
    ] = ""

    def __post_init__(self) -> None:
        _http_url("s3_endpoint_url", self.s3_endpoint_url)
        for host in filter(None, (h.strip() for h in self.allowed_hosts.split(","))):
            found = re.fullmatch(_ALLOWED_HOST, host)
            if not found or (found["port"] and not 0 < int(found["port"]) < 65536):
                # compared as written with an event's host (or host:port): a URL, a path, a
                # wildcard or a list split by spaces allowed nothing, silently
                raise ValueError(
                    f"allowed_hosts: {host!r} is not a host or host:port (comma-separated, "
                    "e.g. registry.ml.svc:5000,10.0.0.7:5000; no scheme, path or wildcard)"
                )


class LayoutSettings(_Section, frozen=True, kw_only=True):
    pattern: Annotated[str, doc("where a model version lives in a bucket")] = (
        "models/{name}/{version}/"
    )
    marker: Annotated[str, doc("the file whose arrival means 'pushed'")] = "_SUCCESS"

    def __post_init__(self) -> None:
        for name, value in (("pattern", self.pattern), ("marker", self.marker)):
            try:
                ObjectLayout(**{name: value})
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None  # "<field>: …" names the field

    def object_layout(self) -> ObjectLayout:
        return ObjectLayout(pattern=self.pattern, marker=self.marker)

    def prefix_for(self, name: str, version: str) -> str:
        return self.object_layout().prefix(name, version)


class IngressSettings(_Section, frozen=True, kw_only=True):
    # 3 MiB, the API server's largest request: a Model is as big as etcd stores (1.5 MiB of
    # labels), and its events, the whole object, were 413 at 1 MiB (never retried: never
    # registered, its deletion never cleaned up); as admission.max_review_bytes
    max_body_bytes: Annotated[
        int, doc("larger deliveries get 413 (a Model's event is the whole object)", gt=0)
    ] = 3 << 20
    auth: Annotated[
        str, doc("delivery authentication spec: none, oidc:…, hmac:…, bearer:…", secret=True)
    ] = "none"
    route_auth: Annotated[
        str, doc("per-path overrides of ingress.auth: /path=spec;/other=spec", secret=True)
    ] = ""
    route_kinds: Annotated[
        str,
        doc(
            "upstream kinds each path accepts: /path=kind,kind;… (canonical, gcs, s3, oci, zot, "
            "artifact-registry, kubernetes, schedule, *); unlisted: everything on an unauthenticated "
            "path, every kind but canonical on an authenticated one"
        ),
    ] = ""
    route_namespaces: Annotated[
        str,
        doc(
            "the tenant each path belongs to: /path=namespace;… (events through it are that "
            "namespace's; one naming another is refused)"
        ),
    ] = ""
    max_events: Annotated[
        int, doc("events one delivery may carry (a batch, S3 records); more get 413", ge=1)
    ] = 100
    deadline: Annotated[
        float,
        seconds("seconds one delivery may work; events left then answer 503 (redelivered)", gt=0),
    ] = 60.0
    max_future_skew: Annotated[
        float, seconds("seconds an event's time may lie in the future before it is refused", ge=0)
    ] = 300.0
    registry_host: Annotated[
        str, doc("the OCI registry host zot's events come from (zot does not name it)")
    ] = ""
    dedupe_size: Annotated[int, doc("recent event ids remembered per process (0 = off)", ge=0)] = (
        10_000
    )

    def __post_init__(self) -> None:
        if self.registry_host:  # every zot event's oci://HOST/…: else each one a 400
            from modelhooks.events.sources._oci import is_registry_host

            if not is_registry_host(self.registry_host):
                raise ValueError(
                    f"registry_host: {self.registry_host!r} is not a registry host (host or "
                    "host:port, e.g. zot.example:5000; no scheme or path)"
                )


class RouterSettings(_Section, frozen=True, kw_only=True):
    triggers: Annotated[
        Path | None,
        doc(
            "Knative Trigger YAML file or directory (default: the packaged infra/knative/triggers.yaml)"
        ),
    ] = None
    max_depth: Annotated[int, doc("reply hops followed by `serve`", ge=1, le=64)] = 8
    sink: Annotated[
        str, doc("where replies are POSTed instead of answered (SinkBinding)", env="K_SINK")
    ] = ""
    subscribers: Annotated[
        str,
        doc(
            "functions run elsewhere, `function=URL;…`: `serve` is then their Broker, POSTing "
            "each event the Triggers route to them and routing their replies (a cluster "
            "without Knative, infra/kubernetes); the others run in-process"
        ),
    ] = ""
    timeout: Annotated[
        float, seconds("seconds a subscriber may take to answer (sign hashes whole models)", gt=0)
    ] = 900.0

    def __post_init__(self) -> None:
        _http_url("sink", self.sink)


class ServeSettings(_Section, frozen=True, kw_only=True):
    host: Annotated[str, doc("`modelhooks serve` listen address", flag="--host")] = "127.0.0.1"
    port: Annotated[
        int, doc("listen port (0 = any free port)", env="PORT", flag="--port", ge=0, le=65535)
    ] = 8080
    watch_interval: Annotated[
        float,
        seconds("seconds between scans of the local store for ready markers (0 = off)", ge=0),
    ] = 1.0
    threads: Annotated[
        int, doc("deliveries handled at once (more connections wait, bounded)", ge=1, le=256)
    ] = 8
    read_timeout: Annotated[
        float, seconds("seconds a client may stay silent mid-request before it is cut off", gt=0)
    ] = 30.0
    keepalive: Annotated[
        int, seconds("seconds an idle keep-alive connection stays open (0 = close)", ge=0)
    ] = 5
    functions: Annotated[
        str,
        doc(
            "the functions `serve` answers for, comma-separated (empty = every one, and the "
            "broker on every other path); e.g. `admission` for the admission webhook's "
            "Deployment, which then answers nothing else"
        ),
    ] = ""


class SigningSettings(_Section, frozen=True, kw_only=True):
    enabled: Annotated[
        Literal["", "true", "false"],
        doc(
            "explicit on/off; empty: on when a key or certificate is set, or when all of "
            "SIGSTORE_TUF_URL, SIGSTORE_FULCIO_URL, SIGSTORE_REKOR_URL are"
        ),
    ] = ""
    key: Annotated[str, doc("EC private key PEM (key method; the certificate's key)")] = ""
    password_file: Annotated[str, doc("file holding the private key's password")] = ""
    certificate: Annotated[str, doc("signing certificate PEM (certificate method)")] = ""
    certificate_chain: Annotated[
        str, doc("PEM files, comma-separated: intermediates to sign, trusted roots to verify")
    ] = ""
    public_key: Annotated[str, doc("public key PEM to verify with (key method)")] = ""
    identity_token: Annotated[
        str,
        doc(
            "keyless: the OIDC token file, re-read for every signature (a service-account "
            "token projected with audience sigstore); empty: "
            "/var/run/secrets/kubernetes.io/serviceaccount/token"
        ),
    ] = ""
    trust_config: Annotated[
        str,
        doc(
            "keyless: a sigstore ClientTrustConfig JSON (trusted root + signing config); "
            "empty: SIGSTORE_TUF_URL (with SIGSTORE_TUF_ROOT) and SIGSTORE_FULCIO_URL, "
            "SIGSTORE_REKOR_URL, SIGSTORE_TSA_URL"
        ),
    ] = ""
    identity: Annotated[str, doc("keyless verify: the signer identity expected")] = ""
    issuer: Annotated[str, doc("keyless verify: the OIDC issuer expected")] = ""
    signature_name: Annotated[
        str, doc("the signature's file name inside the model prefix (not layout.marker's)")
    ] = "model.sig"
    hash: Annotated[Literal["sha256", "blake3"], doc("digest of each file")] = "sha256"
    shard_size: Annotated[
        int, doc("hash files in shards of this many bytes (0 = one digest per file)", ge=0)
    ] = 0

    def __post_init__(self) -> None:
        refused = file_name_refusal(self.signature_name)
        if refused:  # "<field>: …" names the field
            raise ValueError(f"signature_name: {refused}")


class OciSettings(_Section, frozen=True, kw_only=True):
    username: Annotated[
        str,
        doc(
            "OCI registry user, sent as each registry's challenge asks: to its token realm "
            "(Bearer) or to the registry (Basic); `oauth2accesstoken` with an empty password: "
            "an Application Default Credentials access token (Artifact Registry); Google's "
            "users (oauth2accesstoken, _token, _json_key) go to *.pkg.dev and gcr.io alone; "
            "others to oci.credential_hosts alone; empty: anonymous"
        ),
    ] = ""
    password: Annotated[
        str,
        doc(
            "OCI registry password or token: a literal, env:NAME or file:PATH; empty with "
            "user `oauth2accesstoken`: the ADC access token, refreshed as it expires",
            secret=True,
        ),
    ] = ""
    credential_hosts: Annotated[
        str,
        doc(
            "hosts oci.username and oci.password are sent to, comma-separated: "
            "registry.example.com (its https port), reg.example:5000, *.example.com (its "
            "subdomains); a registry's token server too (Docker Hub: "
            "registry-1.docker.io,auth.docker.io); any other registry or token server an "
            "event, a Model or a challenge names is asked anonymously; required with "
            "oci.username (but Google's users: *.pkg.dev, gcr.io)"
        ),
    ] = ""
    artifact_registry_endpoint: Annotated[
        str,
        doc(
            "Artifact Registry API that prune uses for LOCATION-docker.pkg.dev repositories "
            "(history in one listing, untagged versions, batched deletes; Application Default "
            "Credentials); empty: their Docker path, like any registry"
        ),
    ] = "https://artifactregistry.googleapis.com"

    def __post_init__(self) -> None:
        _http_url("artifact_registry_endpoint", self.artifact_registry_endpoint)


class PruneSettings(_Section, frozen=True, kw_only=True):
    policy_file: Annotated[
        str,
        doc(
            "YAML retention policies for OCI repositories (`policies: [{repositories, streams, "
            "keep, protect, grace_hours, untagged_hours}]`); empty: prune acts only for Models "
            "with spec.retention"
        ),
    ] = ""


class CleanupSettings(_Section, frozen=True, kw_only=True):
    policy_file: Annotated[
        str,
        doc(
            "YAML deletion policies by model name (`policies: [{models, deletionPolicy: "
            "Retain|Delete|Untag, protect, old_versions}]`) for deletions that carry no "
            "spec.deletionPolicy; empty: Retain"
        ),
    ] = ""
    kubeconfig: Annotated[
        str,
        doc(
            "kubeconfig through which cleanup reads the Secret a Model's spec.source.secretRef "
            "names, in the Model's namespace, and the namespace's Models (a source another "
            "live Model names is kept); empty: the pod's in-cluster config when running in "
            "Kubernetes, else none (a Model naming a secretRef is then a configuration error, "
            "and no Model is read)"
        ),
    ] = ""


class NotifySettings(_Section, frozen=True, kw_only=True):
    kubeconfig: Annotated[
        str,
        doc(
            "kubeconfig through which notify writes Models' status, finalizer and Events; "
            "empty: the pod's in-cluster config when running in Kubernetes, else none "
            "(notify then skips every event)"
        ),
    ] = ""
    rollout: Annotated[
        bool,
        doc(
            "when a Model becomes Ready, annotate the Deployments and KServe InferenceServices "
            "of its namespace that carry `modelhooks.dev/model: <its name>` with "
            "`modelhooks.dev/model-version: <version>@<digest>` (needs the ClusterRole "
            "modelhooks-notify-rollout bound in that namespace)"
        ),
    ] = False


class TransferSettings(_Section, frozen=True, kw_only=True):
    timeout: Annotated[
        float,
        seconds(
            "seconds one transfer.requested may copy before it stops: the artifact is then "
            "ABANDONED with the reason and the delivery answers 503, so the platform "
            "redelivers and the copy resumes; keep it under the Service's timeoutSeconds "
            "(its credentials and signing are the MODEL_SYNC_* settings of `modelhooks "
            "transfer`)",
            gt=0,
        ),
    ] = 900.0


class TenancySettings(_Section, frozen=True, kw_only=True):
    tenants: Annotated[
        str,
        doc(
            "namespace=pattern,pattern;… buckets/repositories each namespace may act on "
            "(glob); empty = no tenancy checks"
        ),
    ] = ""


class AdmissionSettings(_Section, frozen=True, kw_only=True):
    tls_cert_file: Annotated[
        str,
        doc(
            "serving certificate (PEM) of the admission webhook: set with tls_key_file, "
            "`modelhooks serve` and the admission target answer HTTPS; both files are "
            "re-read when they change (a rotated Secret needs no restart)"
        ),
    ] = ""
    tls_key_file: Annotated[str, doc("private key (PEM) of tls_cert_file")] = ""
    kubeconfig: Annotated[
        str,
        doc(
            "kubeconfig through which admission reads VerificationPolicies; empty: the "
            "pod's in-cluster config when running in Kubernetes, else none (every model "
            "reference is then refused: nothing is trusted)"
        ),
    ] = ""
    timeout: Annotated[
        float,
        seconds(
            "seconds an AdmissionReview may take; keep it under the webhook's timeoutSeconds "
            "(infra/k8s/admission): past it the review is answered by the policies' "
            "failurePolicy, before the apiserver gives up",
            gt=0,
        ),
    ] = 8.0
    cache_size: Annotated[
        int, doc("verified (digest, policy) pairs remembered (successes only; 0 = off)", ge=0)
    ] = 1000
    cache_bytes: Annotated[int, doc("bytes the verification cache may hold", ge=0)] = 1 << 20
    cache_ttl: Annotated[
        float, seconds("seconds a successful verification is remembered", ge=0)
    ] = 600.0
    max_review_bytes: Annotated[
        int, doc("largest AdmissionReview read (bigger ones are refused with the reason)", gt=0)
    ] = 3 << 20
    verifier_image: Annotated[
        str,
        doc(
            "image of the init containers the mutating webhook adds for `verifyOn: node` "
            "policies (they run `modelhooks verify` on the mounted model): this project's "
            "image, as infra names it; set it to the image you deploy (kustomize's image "
            "setting does not rewrite it)"
        ),
    ] = "registry.example.com/modelhooks:0.1.0"


class Settings(_Section, frozen=True, kw_only=True):
    home: Annotated[Path, doc("embedded state: store/, registry.db, keys")] = Path(".modelhooks")
    log_level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR"], doc("log threshold")] = (
        "INFO"
    )
    registry: RegistrySettings = field(default_factory=RegistrySettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    layout: LayoutSettings = field(default_factory=LayoutSettings)
    ingress: IngressSettings = field(default_factory=IngressSettings)
    router: RouterSettings = field(default_factory=RouterSettings)
    serve: ServeSettings = field(default_factory=ServeSettings)
    signing: SigningSettings = field(default_factory=SigningSettings)
    oci: OciSettings = field(default_factory=OciSettings)
    prune: PruneSettings = field(default_factory=PruneSettings)
    cleanup: CleanupSettings = field(default_factory=CleanupSettings)
    notify: NotifySettings = field(default_factory=NotifySettings)
    transfer: TransferSettings = field(default_factory=TransferSettings)
    tenancy: TenancySettings = field(default_factory=TenancySettings)
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)


class SettingSpec(msgspec.Struct, frozen=True):
    """One row of the settings table (a Struct: cheaper to make than a dataclass)."""

    path: tuple[str, ...]
    env: str
    flag: str
    default: Any
    description: str
    secret: bool = False
    choices: tuple[str, ...] = ()  # the values a Literal setting takes

    @property
    def name(self) -> str:
        return ".".join(self.path)


def describe(
    model: type[msgspec.Struct] = Settings, path: tuple[str, ...] = ()
) -> Iterator[SettingSpec]:
    """Every leaf setting with its env var, flag and default (the README table)."""
    for name, hint, default in _fields(model):
        if isinstance(hint, type) and issubclass(hint, _Section):
            yield from describe(hint, (*path, name))
            continue
        meta = next((m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Meta)), Meta())
        extra = meta.extra or {}
        full = (*path, name)
        yield SettingSpec(
            path=full,
            env=str(extra.get("env") or PREFIX + "_".join(full).upper()),
            flag=str(extra.get("flag") or "--" + "-".join(full).replace("_", "-")),
            default=default,
            description=meta.description or "",
            secret=bool(extra.get("secret")),
            choices=_choices(hint),
        )


def _fields(model: type[msgspec.Struct]) -> Iterator[tuple[str, Any, Any]]:
    """(name, type, default) of each of a section's fields, in order, as
    msgspec.structs.fields gives them (NODEFAULT for a default_factory) without resolving
    the annotations again as type hints (~0.4 ms of every start): they are the objects
    themselves here (no `from __future__ import annotations`)."""
    names, defaults = model.__struct_fields__, model.__struct_defaults__
    hints: dict[str, Any] = {}
    for klass in reversed(model.__mro__):
        hints.update(vars(klass).get("__annotations__", {}))
    padded = (msgspec.NODEFAULT,) * (len(names) - len(defaults)) + defaults
    for name, default in zip(names, padded, strict=True):
        made = isinstance(default, Factory)  # a default_factory
        yield name, hints[name], msgspec.NODEFAULT if made else default


def _choices(hint: Any) -> tuple[str, ...]:
    """The values of a `Literal` setting (under its `Annotated`), else ()."""
    import typing

    base = typing.get_args(hint)[0] if hasattr(hint, "__metadata__") else hint
    if typing.get_origin(base) is not Literal:
        return ()
    return tuple(str(c) for c in typing.get_args(base))


def load_settings(
    args: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> Settings:
    """Merge flags (`args`, keyed by dotted name) > env > config file > defaults."""
    args = {k: v for k, v in (args or {}).items() if v is not None}
    env = os.environ if env is None else env
    specs = list(describe())
    merged: dict[str, Any] = {}
    origin: dict[tuple[str, ...], str] = {}
    switches = {s.path: s.default for s in specs if _is_switch(s)}

    def put(path: tuple[str, ...], value: Any, where: str) -> None:
        node = merged
        for n, part in enumerate(path[:-1], 1):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):  # a config file gave a value where a section is
                raise ConfigError(f"invalid setting {origin[path[:n]]}: expected a section")
        node[path[-1]] = _spelled(switches.get(path), value)
        origin[path] = where

    from_env = {s.path: (s.env, env[s.env]) for s in specs if env.get(s.env, "") != ""}
    home = Path(args.get("home") or env.get(PREFIX + "HOME") or Settings().home)
    path = config_file or (Path(env[PREFIX + "CONFIG"]) if env.get(PREFIX + "CONFIG") else None)
    if path is None and (home / "config.yaml").is_file():
        path = home / "config.yaml"
    if path is not None:
        sections = {spec.path[:n] for spec in specs for n in range(1, len(spec.path))}
        for keys, value in _flatten(_read_yaml(path), sections):
            put(keys, value, f"{'.'.join(keys)} in {path}")
    for keys, (var, value) in from_env.items():
        put(keys, value, f"{var}={value!r} (environment)")
    by_name = {s.name: s for s in specs}
    for name, value in args.items():
        spec = by_name.get(name)
        if spec is None:
            raise ConfigError(f"unknown setting {name!r}")
        put(spec.path, value, f"{spec.flag}={value!r} (command line)")
    try:
        settings = msgspec.convert(merged, Settings, strict=False, dec_hook=_decode)
    except msgspec.ValidationError as exc:
        m = re.match(_ERROR, str(exc))
        msg, loc = (
            (m["msg"], tuple(filter(None, (m["path"] or "").split(".")))) if m else (str(exc), ())
        )
        named = re.search(_UNKNOWN, msg) or re.match(_FIELD_FIRST, msg)
        if named:
            loc = (*loc, named["name"])
            msg = re.sub(_FIELD_FIRST, "", msg)
        where = origin.get(loc) or ".".join(loc) or "settings"
        spec = next((s for s in specs if s.path == loc), None)
        if spec is not None and spec.choices:
            msg += f" (one of: {', '.join(repr(c) for c in spec.choices)})"
        elif spec is not None and isinstance(spec.default, bool):
            msg += " (on or off: true, yes, on, 1 / false, no, off, 0)"
        raise ConfigError(f"invalid setting {where}: {msg}") from None
    if settings.signing.signature_name == settings.layout.marker:
        # the signature written over the ready marker: a push again, signed again, …
        env_of = {spec.path: spec.env for spec in specs}
        sig, marker = (
            origin.get(path) or f"{env_of[path]} (its default)"
            for path in (("signing", "signature_name"), ("layout", "marker"))
        )
        raise ConfigError(
            f"invalid settings {sig} and {marker}: the signature and the ready marker are "
            f"the same file {settings.layout.marker!r} (signing would write over the marker); "
            "name them apart"
        )
    return settings


# A validation error's parts: patterns compiled when an error first needs them (re's own
# cache), not at every start
_ERROR = r"(?s)^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$"
_UNKNOWN = r"unknown field `(?P<name>[^`]+)`"
_FIELD_FIRST = r"^(?P<name>[a-z0-9_]+): "


MAX_CONFIG_BYTES = 1 << 20  # a config file's: its settings take a few KB


# How an on/off setting may be spelled, in any case (as `modelhooks transfer`'s): the
# settings' own bools took only true/false/1/0 and signing.enabled only 'true'/'false', so a
# config file's `enabled: true` (YAML's boolean) was refused as "Expected `str`, got `bool`"
# and MODELHOOKS_SIGNING_ENABLED=True or =1 refused where ALLOW_LOCAL_TARGETS=True was taken.
_ON, _OFF = {"1", "true", "t", "yes", "y", "on"}, {"0", "false", "f", "no", "n", "off"}


def _is_switch(spec: SettingSpec) -> bool:
    """A bool setting, or a tri-state one ('' for automatic, 'true', 'false')."""
    return isinstance(spec.default, bool) or spec.choices == ("", "true", "false")


def _spelled(default: Any, value: Any) -> Any:
    """`value` of an on/off setting (whose default is `default`) as the setting takes it:
    a bool for a bool, 'true'/'false' for a tri-state; anything else as it is (refused by
    the setting's type, naming it)."""
    if default is None or (isinstance(value, bool) and isinstance(default, bool)):
        return value
    word = str(value).strip().lower() if isinstance(value, str | bool) else None
    on = True if word in _ON else False if word in _OFF else None
    if on is None:
        return value
    return on if isinstance(default, bool) else ("true" if on else "false")


def _decode(kind: type, value: Any) -> Any:
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(f"cannot read a {kind.__name__} from {value!r}")


def _read_yaml(path: Path) -> dict[str, Any]:
    """The config file's mapping, read as at most MAX_CONFIG_BYTES: `--config /dev/zero` (or
    a model's weights named by mistake) was read whole into memory, and YAML nested past
    the parser's recursion (`[` x 10**5) was an internal error."""
    import yaml

    try:
        with path.open("rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"config file {path} is over {MAX_CONFIG_BYTES} bytes: not a config file"
            )
        doc = yaml.load(data.decode(), Loader=_unique_keys(yaml)) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"cannot read config file {path}: nested too deep") from None
    except ValueError as exc:  # a value YAML reads but cannot build: 2026-02-30, 5,000 digits
        raise ConfigError(f"cannot read config file {path}: a value that is none: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings")
    return doc


def _unique_keys(yaml: Any) -> Any:
    """A safe YAML loader that refuses a key given twice in one mapping: PyYAML keeps the
    last, so a second `serve:` section silently dropped every setting of the first."""

    class UniqueKeys(yaml.SafeLoader):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            first: dict[Any, Any] = {}
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    name = self.construct_object(key)
                    if name in first:
                        raise yaml.constructor.ConstructorError(
                            None,
                            None,
                            f"{name!r} given twice (first on line {first[name].line + 1})",
                            key.start_mark,
                        )
                    first[name] = key.start_mark
            return super().construct_mapping(node, deep=deep)

    return UniqueKeys


def _flatten(
    doc: Mapping[str, Any], sections: set[tuple[str, ...]], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) of each setting in a config file's mapping, descending only into the
    sections settings have: what is under any other key (a typo, a YAML alias) is that
    key's value, refused whole, and a file of 1 KB whose aliases nest mappings nine deep
    (a billion leaves) is no longer walked leaf by leaf."""
    for key, value in doc.items():
        keys = (*path, str(key))
        if isinstance(value, Mapping) and keys in sections:
            yield from _flatten(value, sections, keys)
        else:
            yield keys, value
