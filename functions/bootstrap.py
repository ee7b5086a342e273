"""The composition root: settings → adapters → bound functions → delivery, built once per
process (and cached, so warm instances reuse their clients).

Each handler names the dependencies it needs as keyword-only parameters; `build` binds
exactly those from `Deps` (cosmicpython's bootstrap does the same by parameter name). Nothing
is built at import time; `build` builds the dependencies of the functions the process hosts
(functions-framework's target alone, or every function for `modelhooks serve`) and nothing
else, so a bad setting stops start-up; any other is built, and its module imported, when first
asked for. Heavy SDKs are imported by the adapter that needs them, when a function first
uses it. Tests swap any dependency in one place:

>>> app = build(settings, registry=InMemoryModelRegistry())  # doctest: +SKIP
>>> app.broker().publish(event)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import cache, lru_cache
from pathlib import Path
from threading import Lock, RLock
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from modelhooks.core.errors import ConfigError
from modelhooks.core.extras import MissingExtra, missing
from modelhooks.core.function import Function
from modelhooks.core.logs import configure as configure_logs
from modelhooks.core.settings import MAX_CONFIG_BYTES, Settings, load_settings
from modelhooks.core.tenancy import Tenancy
from modelhooks.delivery.dedupe import Dedupe
from modelhooks.delivery.routes import RouteAuth
from modelhooks.delivery.runtime import Delivery, Sink
from modelhooks.events.auth import resolve_value
from modelhooks.events.model import ArtifactPushed, CanonicalEvent
from modelhooks.handlers import NAMES, load

# What only some functions use is imported where it is built, when it is first asked for: a
# process hosting one function imports only what that function needs.
if TYPE_CHECKING:
    from modelhooks.adapters.oci.clients import OciClients
    from modelhooks.adapters.signing.config import SigningConfig
    from modelhooks.adapters.signing.streaming import HashOptions
    from modelhooks.adapters.transfer.request import Transfers
    from modelhooks.core.cleanup import Cleanup
    from modelhooks.core.content import ContentResolver
    from modelhooks.core.ports import (
        Cluster,
        DeliveryLog,
        ModelRegistry,
        ObjectStore,
        Secrets,
        Signer,
    )
    from modelhooks.core.retention import Policies
    from modelhooks.core.stores import Stores
    from modelhooks.core.verification import ModelVerifier, PolicySource, Verdicts
    from modelhooks.delivery.broker import Broker

__all__ = [
    "NEEDS",
    "App",
    "Deps",
    "build",
    "extras_of",
    "hosted",
    "model_registry",
    "object_store",
    "reset",
]

T = TypeVar("T")


class Deps:
    """Every dependency a handler may name, by parameter name. Each is built once, when first
    asked for: a process builds (and imports) only what the functions it hosts name."""

    registry: ModelRegistry
    stores: Stores
    content: ContentResolver  # an object-store version's content digest (ingress, register)
    oci: OciClients
    signer: Signer | None  # None when signing is off (SigningConfig.enabled)
    hash_options: HashOptions | None  # None when signing is off
    check_namespace: bool  # tenancy is on: only the owning namespace may act on a model
    retention: Policies  # prune's policies by repository
    tenancy: Tenancy  # which namespace may act on which bucket or repository
    cleanup: Cleanup  # cleanup's policies by model name, and the ready marker
    secrets: Secrets | None  # Models' namespaces' Secrets (cleanup); None: no cluster access
    cluster: Cluster | None  # Models' status, finalizer, Events (notify); None: no cluster
    models: Cluster | None  # the Models cleanup spares the sources of; None: no cluster
    rollout: bool  # notify rolls out the workloads of a Model that becomes Ready
    policies: PolicySource  # admission: VerificationPolicies (none outside a cluster)
    model_verifier: ModelVerifier  # admission: a model decided from its signature and digests
    verdicts: Verdicts  # admission: successful verifications, bounded, with a TTL
    review_timeout: float  # admission: seconds an AdmissionReview may take
    verifier_image: str  # admission: the image of the init containers verifying on the node
    verifier_root: Callable[[], str]  # admission: the private Sigstore root they are given
    transfers: Transfers  # transfer: the process's MODEL_SYNC_* configuration, the time bound

    def __init__(self, makers: Mapping[str, Callable[[Deps], Any]]) -> None:
        self.__dict__["_makers"] = makers
        self.__dict__["_lock"] = RLock()  # a dependency may be built from others

    def __getattr__(self, name: str) -> Any:  # only for what is not built yet
        make = self._makers.get(name)
        if make is None:
            raise AttributeError(f"{type(self).__name__} has no {name!r}")
        with self._lock:
            if name not in self.__dict__:
                self.__dict__[name] = make(self)
        return self.__dict__[name]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def built(self) -> dict[str, Any]:
        """The dependencies built so far, by name."""
        return {k: v for k, v in self.__dict__.items() if k in self._makers}


DEPS: tuple[str, ...] = tuple(Deps.__annotations__)


class App(msgspec.Struct, frozen=True):
    """One process's wiring: its settings, the handlers' dependencies and the delivery (a
    Struct: cheaper to make than a dataclass)."""

    settings: Settings
    deps: Deps
    delivery: Delivery
    extras: frozenset[str] = frozenset()  # those of the backends selected, installed

    def function(self, name: str) -> Function:
        """The function called `name`, bound to its dependencies."""
        return self.delivery.function(name)

    def broker(self) -> Broker:
        """The in-process broker, routing by the Trigger YAML (read now: a bad trigger file
        stops start-up, not a request)."""
        from modelhooks.delivery.broker import Broker
        from modelhooks.delivery.router import load_triggers

        triggers = load_triggers(self.settings.router.triggers)
        return Broker(triggers, self.delivery, self.settings.router.max_depth)


def build(settings: Settings | None = None, **overrides: Any) -> App:
    """The process's wiring for `settings` (default: from the environment and config file).

    `overrides` replace dependencies by name: a `Deps` field (`registry=…`) or a `Delivery`
    field (`sink=…`, `function=…`). Without overrides the result is cached."""
    settings = settings if settings is not None else _default_settings()
    if overrides:
        return _assemble(settings, overrides)
    with _LOCK:
        if settings not in _BUILT:
            _BUILT[settings] = _assemble(settings, {})
            while len(_BUILT) > 8:
                _close(_BUILT.pop(next(iter(_BUILT))))
        return _BUILT[settings]


# The process's cached wiring, by settings (warm instances reuse clients); reset() empties it.
_BUILT: dict[Settings, App] = {}
_LOCK = Lock()
_INHERITED: list[App] = []  # a forked process's parent's wiring: kept, never used or closed


def _after_fork_in_child() -> None:
    """A forked process (gunicorn's worker: functions-framework builds the target in the
    master, then forks) builds its own wiring on its first `build()`. The parent's holds
    threads that did not survive the fork (the delivery log's group commit, checkpoints)
    and SQLite connections, which SQLite forbids using, or closing, across a fork."""
    global _LOCK
    _LOCK = Lock()  # copied as it was, perhaps held
    _INHERITED.extend(_BUILT.values())
    _BUILT.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


@lru_cache(maxsize=1)
def _default_settings() -> Settings:
    return load_settings()


def _assemble(settings: Settings, overrides: dict[str, Any]) -> App:
    configure_logs(settings.log_level)
    unknown = set(overrides) - set(DEPS) - set(Delivery.__struct_fields__)
    if unknown:
        raise TypeError(f"build() got unknown overrides: {', '.join(sorted(unknown))}")
    elsewhere = _elsewhere(settings)
    # a function run elsewhere needs nothing here but what names its pushes (Delivery.enter)
    needs = {
        n
        for name in hosted()
        for n in _needs(load(name))
        if name not in elsewhere or n == "content"
    }
    extras = _require_extras(settings, needs - set(overrides))
    deps = _deps(settings, {k: v for k, v in overrides.items() if k in DEPS})
    for name in sorted(needs):  # built now: a bad setting stops start-up, not a delivery
        getattr(deps, name)

    @cache
    def function(name: str) -> Function:
        if name in elsewhere:
            from modelhooks.delivery.remote import remote

            return remote(load(name), elsewhere[name], settings.router.timeout)
        fn = load(name)
        return fn.bind({n: getattr(deps, n) for n in fn.needs if n in DEPS})

    delivery = Delivery(
        function=function,
        names=NAMES,
        auth=RouteAuth.from_settings(
            settings.ingress.auth,
            settings.ingress.route_auth,
            settings.ingress.route_kinds,
            settings.ingress.route_namespaces,
        ),
        tenancy=deps.tenancy,
        dedupe=Dedupe(settings.ingress.dedupe_size, _delivery_log(settings)),
        layout=settings.layout.object_layout(),
        max_body_bytes=settings.ingress.max_body_bytes,
        registry_host=settings.ingress.registry_host or None,
        sink=_http_sink(settings.router.sink) if settings.router.sink else None,
        max_future_skew=settings.ingress.max_future_skew,
        max_events=settings.ingress.max_events,
        deadline=settings.ingress.deadline,
        # only a function accepting pushes has them named (notify's target builds no stores)
        resolve=deps.content if "content" in needs else None,
        max_review_bytes=settings.admission.max_review_bytes,
    )
    delivery = msgspec.structs.replace(
        delivery, **{k: v for k, v in overrides.items() if k not in DEPS}
    )
    return App(settings, deps, delivery, extras)


def _elsewhere(settings: Settings) -> dict[str, str]:
    """The functions router.subscribers runs in other processes (their URLs), by name."""
    if not settings.router.subscribers.strip():
        return {}
    from modelhooks.delivery.remote import subscribers

    return subscribers(settings.router.subscribers, NAMES)


def _access_token_user(settings: Settings) -> bool:
    """oci.username is Artifact Registry's access-token user, without a password: ADC's
    token is the password (the credentials module is imported by what names a registry)."""
    if not settings.oci.username:  # no user: not its module either (cold start)
        return False
    from modelhooks.adapters.oci.credentials import OAUTH2_ACCESS_TOKEN

    return settings.oci.username == OAUTH2_ACCESS_TOKEN and not settings.oci.password


# What each dependency can import, by the backend the settings select for it: (extra, what
# selects it, whether the settings do; None: chosen per event, e.g. an Artifact Registry host
# an event names, which falls back to the registry's Docker path without the extra). A
# process requires at start-up the extras of the selected backends of the functions it hosts
# (a missing one stops it, naming the extra); a Cloud Run source folder carries every extra
# its function's dependencies can import, whatever the backend (`extras_of`).
_Need = tuple[str, str, Callable[[Settings], bool] | None]
_CLOUD: tuple[_Need, ...] = (
    ("gcp", "store.backend=cloud (gs:// on GCS)", lambda s: s.store.backend == "cloud"),
    ("aws", "store.backend=cloud (s3:// on S3)", lambda s: s.store.backend == "cloud"),
)
_SIGNING: tuple[_Need, ...] = (
    (
        "signing",
        "signing (MODELHOOKS_SIGNING_*)",
        lambda s: _signing(s).enabled()[0],
    ),
)
NEEDS: dict[str, tuple[_Need, ...]] = {
    "registry": (
        ("k8s", "registry.backend=kubernetes", lambda s: s.registry.backend == "kubernetes"),
    ),
    "stores": _CLOUD,
    "content": _CLOUD,  # the ingress's too: it names every push a function accepts
    "oci": (
        (
            "gcp",
            "oci.username=oauth2accesstoken (Application Default Credentials)",
            _access_token_user,
        ),
        ("gcp", "Artifact Registry's API (oci.artifact_registry_endpoint)", None),
    ),
    "signer": _SIGNING,
    "hash_options": _SIGNING,
    "secrets": (
        (
            "k8s",
            "cleanup reading Secrets (cleanup.kubeconfig, or in a cluster)",
            lambda s: bool(s.cleanup.kubeconfig) or _in_cluster(),
        ),
        *_CLOUD,  # a Model's Secret holds GCS or S3 keys
    ),
    "policies": (
        (
            "k8s",
            "admission reading VerificationPolicies (admission.kubeconfig, or in a cluster)",
            lambda s: bool(s.admission.kubeconfig) or _in_cluster(),
        ),
    ),
    "model_verifier": (("signing", "admission verifying signatures", None),),
    "models": (
        (
            "k8s",
            "cleanup reading Models (cleanup.kubeconfig, or in a cluster)",
            lambda s: bool(s.cleanup.kubeconfig) or _in_cluster(),
        ),
    ),
    "cluster": (
        (
            "k8s",
            "notify (notify.kubeconfig, or in a cluster)",
            lambda s: bool(s.notify.kubeconfig) or _in_cluster(),
        ),
    ),
}


def _in_cluster() -> bool:
    """In a Kubernetes Pod (its service account mounted)."""
    from modelhooks.adapters.kube_client import in_cluster

    return in_cluster()


def _needs(fn: Function) -> set[str]:
    """The dependencies a function's code paths use: those its handler names, and the
    ingress's content resolver when it acts on object-store pushes (Delivery.enter)."""
    pushes = ArtifactPushed.TYPE in fn.accepts and fn.object_pushes
    return set(fn.needs) | ({"content"} if pushes else set())


def extras_of(fn: Function) -> tuple[str, ...]:
    """Every extra `fn`'s code paths can import, whatever backends it is configured with
    (what its Cloud Run source folder installs), sorted."""
    derived = {extra for need in _needs(fn) for extra, _, _ in NEEDS.get(need, ())}
    return tuple(sorted(derived | set(fn.extras)))


def hosted() -> tuple[str, ...]:
    """The functions this process serves: functions-framework's target (it sets
    FUNCTION_TARGET before loading the source, as Cloud Run does), else every one."""
    target = os.environ.get("FUNCTION_TARGET", "")
    return (target,) if target in NAMES else NAMES


def _require_extras(settings: Settings, needs: set[str]) -> frozenset[str]:
    """Start-up: the extras of the backends `settings` select for these dependencies (the
    hosted functions', less the overridden) are installed, else MissingExtra. Returns them."""
    selected = {need for n in sorted(needs) for need in NEEDS.get(n, ())}
    chosen = [
        (extra, why)
        for extra, why, when in sorted(selected, key=lambda need: need[:2])
        if when is not None and when(settings)
    ]
    absent = [(extra, why, module) for extra, why in chosen if (module := missing(extra))]
    if absent:
        raise MissingExtra(*absent)
    return frozenset(extra for extra, _ in chosen)


def _deps(settings: Settings, overrides: dict[str, Any]) -> Deps:
    """How to build each dependency from `settings` (each when first asked for), or the
    override given for it."""

    def content(deps: Deps) -> ContentResolver:
        from modelhooks.adapters.signing import binding_key
        from modelhooks.core.content import ContentResolver

        # what sign writes into a model's prefix is not the model: its content names it alike
        # before and after signing (a redelivery is then a duplicate, not a conflict)
        signature = settings.signing.signature_name
        exclude = frozenset({settings.layout.marker, signature, binding_key(signature)})
        return ContentResolver(deps.stores, exclude, deps.tenancy)

    makers: dict[str, Callable[[Deps], Any]] = {
        "registry": lambda _: model_registry(settings),
        "stores": lambda _: _stores(settings),
        "content": content,
        "oci": lambda _: _oci(settings),
        "signer": lambda _: _signing(settings).signer(),
        "hash_options": lambda d: _signing(settings).options() if d.signer else None,
        "check_namespace": lambda _: bool(settings.tenancy.tenants.strip()),
        "retention": lambda _: _retention(settings),
        "tenancy": lambda _: Tenancy.parse(settings.tenancy.tenants),
        "cleanup": lambda _: _cleanup(settings),
        "secrets": lambda _: _secrets(settings),
        "cluster": lambda _: _cluster(settings),
        "models": lambda _: _models(settings),
        "rollout": lambda _: settings.notify.rollout,
        "policies": lambda _: _policies(settings),
        "model_verifier": lambda d: _model_verifier(settings, d.oci, d.stores),
        "verdicts": lambda _: _verdicts(settings),
        "review_timeout": lambda _: settings.admission.timeout,
        "verifier_image": lambda _: settings.admission.verifier_image,
        "verifier_root": lambda _: _verifier_root(settings),
        "transfers": lambda _: _transfers(settings),
    }
    return Deps(makers | {name: _given(value) for name, value in overrides.items()})


def _given(value: Any) -> Callable[[Deps], Any]:
    return lambda _: value


def _signing(settings: Settings) -> SigningConfig:
    from modelhooks.adapters.signing.config import SigningConfig

    return SigningConfig.from_settings(settings.signing, ready_marker=settings.layout.marker)


def _policies(settings: Settings) -> PolicySource:
    """VerificationPolicies through admission.kubeconfig, else the pod's in-cluster config;
    none outside a cluster (every model reference is then refused)."""
    from modelhooks.adapters.kubernetes.policies import kubernetes_policies

    return kubernetes_policies(settings.admission.kubeconfig)


def _model_verifier(settings: Settings, oci: OciClients, stores: Stores) -> ModelVerifier:
    from modelhooks.adapters.signing.admission import StoreModelVerifier

    return StoreModelVerifier(
        oci,
        stores,
        trust_config=settings.signing.trust_config,
        signature_name=settings.signing.signature_name,
    )


def _verifier_root(settings: Settings) -> Callable[[], str]:
    """The trusted root (JSON) of the private Sigstore instance keyless identities verify
    against here (signing.trust_config, SIGSTORE_TRUSTED_ROOT or SIGSTORE_TUF_URL), read on
    first use and kept; "" for the public-good instance, which the init container knows.
    The trust module is imported then too: only `verifyOn: node` policies with identities ask."""
    import functools

    @functools.cache
    def root() -> str:
        from modelhooks.adapters.signing.trust import SigstoreTrust

        configured = settings.signing.trust_config
        trust = SigstoreTrust.from_env(trust_config=Path(configured) if configured else None)
        return trust.root_json() if trust.private else ""

    return root


def _transfers(settings: Settings) -> Transfers:
    """`modelhooks transfer`'s own configuration (the MODEL_SYNC_* environment and the
    credential files it names), with the hosts events may name and the copy's time bound."""
    from modelhooks.adapters.transfer.request import Transfers

    return Transfers(
        env=dict(os.environ),
        allow_local=settings.store.allow_local_targets,
        allowed_hosts=_allowed_hosts(settings),
        timeout=settings.transfer.timeout,
    )


def _verdicts(settings: Settings) -> Verdicts:
    from modelhooks.core.verification import Verdicts

    a = settings.admission
    return Verdicts(a.cache_size, a.cache_bytes, a.cache_ttl)


def _retention(settings: Settings) -> Policies:
    """prune.policy_file, read and checked at start-up (a bad file stops it, naming why)."""
    from modelhooks.core.retention import Policies

    path = settings.prune.policy_file
    if not path:
        return Policies()
    return _policy_file(path, "MODELHOOKS_PRUNE_POLICY_FILE", Policies.from_yaml)


def _cleanup(settings: Settings) -> Cleanup:
    """cleanup.policy_file (checked at start-up like prune's) and the ready marker."""
    from modelhooks.core.cleanup import Cleanup

    path, marker = settings.cleanup.policy_file, settings.layout.marker
    if not path:
        return Cleanup(marker=marker)
    parse = lambda text, origin: Cleanup.from_yaml(text, origin, marker=marker)  # noqa: E731
    return _policy_file(path, "MODELHOOKS_CLEANUP_POLICY_FILE", parse)


def _secrets(settings: Settings) -> Secrets | None:
    """Secrets through cleanup.kubeconfig, else the pod's in-cluster config; None outside
    a cluster (the kubernetes client is imported when a Secret is first read)."""
    from modelhooks.adapters.kubernetes.secrets import kubernetes_secrets

    return kubernetes_secrets(settings.cleanup.kubeconfig)


def _cluster(settings: Settings) -> Cluster | None:
    """The cluster through notify.kubeconfig, else the pod's in-cluster config; None outside
    a cluster (the kubernetes client is imported when notify first acts)."""
    from modelhooks.adapters.kubernetes.cluster import kubernetes_cluster

    return kubernetes_cluster(settings.notify.kubeconfig)


def _models(settings: Settings) -> Cluster | None:
    """The Models cleanup reads (a live Model's source is not deleted) through
    cleanup.kubeconfig, else the pod's in-cluster config; None outside a cluster."""
    from modelhooks.adapters.kubernetes.connection import Connection

    connection = Connection.configured(
        settings.cleanup.kubeconfig, variable="MODELHOOKS_CLEANUP_KUBECONFIG", needs="cleanup"
    )
    if connection is None:
        return None
    from modelhooks.adapters.kubernetes.cluster import KubernetesCluster  # in a cluster only

    return KubernetesCluster(connection=connection)


def _policy_file(path: str, variable: str, parse: Callable[[str, str], T]) -> T:
    """A policy file, read as at most MAX_CONFIG_BYTES (as the config file: `/dev/zero`, or
    a model's weights named by mistake, was read whole into memory) and parsed by `parse`."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ValueError(f"{variable}={path}: over {MAX_CONFIG_BYTES} bytes: no policy file")
        return parse(data.decode(), f"{variable}={path}")
    except OSError as exc:
        raise ConfigError(f"{variable}={path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{variable}={path}: not UTF-8 text") from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _delivery_log(settings: Settings) -> DeliveryLog | None:
    """Where the registry is durable on this machine (SQLite), so is dedupe."""
    if settings.registry.backend != "sqlite" or settings.ingress.dedupe_size <= 0:
        return None
    from modelhooks.adapters.idempotency.sqlite import SqliteDeliveryLog

    return SqliteDeliveryLog(settings.home / "deliveries.db", settings.ingress.dedupe_size)


def model_registry(settings: Settings) -> ModelRegistry:
    """The registry backend the settings name."""
    if settings.registry.backend == "kubeflow":
        from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry

        token, ca = settings.registry.token, settings.registry.ca
        return KubeflowModelRegistry(
            settings.registry.url,
            token=resolve_value(token, "MODELHOOKS_REGISTRY_TOKEN") if token else None,
            ca=resolve_value(ca, "MODELHOOKS_REGISTRY_CA") if ca else None,
            connections=settings.registry.connections,
        )
    if settings.registry.backend == "kubernetes":
        from modelhooks.adapters.kube_client import check_kubeconfig
        from modelhooks.adapters.model_registry.kubernetes import VARIABLE, KubernetesModelRegistry

        check_kubeconfig(settings.registry.kubeconfig, VARIABLE)  # the client connects lazily
        return KubernetesModelRegistry(
            namespace=settings.registry.namespace, kubeconfig=settings.registry.kubeconfig
        )
    from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry

    return SqliteModelRegistry(settings.home / "registry.db")


def object_store(kind: str, settings: Settings) -> ObjectStore:
    """The object store of one kind: "local" ($MODELHOOKS_HOME/store), "gs" or "s3"."""
    if kind == "gs":
        from modelhooks.adapters.object_store.gcs import GcsObjectStore

        return GcsObjectStore()
    if kind == "s3":
        from modelhooks.adapters.object_store.s3 import S3ObjectStore

        return S3ObjectStore(endpoint_url=settings.store.s3_endpoint_url or None)
    from modelhooks.adapters.object_store.local import LocalObjectStore

    return LocalObjectStore(settings.home / "store")


def _stores(settings: Settings) -> Stores:
    """file:// always reads the local store; gs:// and s3:// too unless store.backend=cloud."""
    from modelhooks.core.stores import Stores

    cloud = settings.store.backend == "cloud"

    def factory(kind: str) -> Any:
        return lambda: object_store(kind if cloud else "local", settings)

    return Stores(
        {"file": lambda: object_store("local", settings), "gs": factory("gs"), "s3": factory("s3")},
        local_root=settings.home / "store",
        allow_local_targets=settings.store.allow_local_targets,
        allowed_hosts=_allowed_hosts(settings),
    )


def _allowed_hosts(settings: Settings) -> frozenset[str]:
    return frozenset(
        h.strip().lower() for h in settings.store.allowed_hosts.split(",") if h.strip()
    )


def _oci(settings: Settings) -> OciClients:
    """Registries named by events: only public addresses unless store.allow_local_targets.
    `oauth2accesstoken` without a password: Application Default Credentials' access token.
    The credentials go to oci.credential_hosts alone (`_credential_hosts`)."""
    from modelhooks.adapters.oci.clients import OciClients

    user, password = settings.oci.username, settings.oci.password
    auth, hosts = None, None
    if user:  # the credentials' module only then (cold start)
        from modelhooks.adapters.oci.credentials import credentials_for

        auth = credentials_for(user, resolve_value(password, "MODELHOOKS_OCI_PASSWORD"))
        hosts = _credential_hosts(settings)
    return OciClients(
        auth,
        allow_local=settings.store.allow_local_targets,
        allowed_hosts=_allowed_hosts(settings),
        artifact_registry_endpoint=settings.oci.artifact_registry_endpoint,
        credential_hosts=hosts,
    )


def _credential_hosts(settings: Settings) -> tuple[str, ...] | None:
    """The host patterns oci.username's credentials may go to. Required: an event or a
    Model names the registry (`oci://evil.example/m:1`), and the registry its token realm,
    so without them the credentials went to whoever was named. None (Google's rule alone,
    `*.pkg.dev`, `gcr.io`) for Google's users, whose registries are the obvious ones."""
    from modelhooks.adapters.oci.auth import GOOGLE_USERS, parse_hosts

    try:
        hosts = parse_hosts(settings.oci.credential_hosts)
    except ValueError as exc:
        raise ConfigError(f"MODELHOOKS_OCI_CREDENTIAL_HOSTS: {exc}") from None
    if hosts or settings.oci.username in GOOGLE_USERS:
        return hosts or None
    zot = settings.ingress.registry_host
    raise ConfigError(
        "MODELHOOKS_OCI_USERNAME is set but MODELHOOKS_OCI_CREDENTIAL_HOSTS names no host: "
        "the registry an event or a Model names (oci://evil.example/m:1), and the token "
        "server its challenge names, would get the credentials; name the registries (and "
        "token servers) they are for, e.g. "
        f"{zot or 'registry.example.com'} (Docker Hub: registry-1.docker.io,auth.docker.io)"
    )


def _http_sink(url: str) -> Sink:
    def send(event: CanonicalEvent) -> None:
        import urllib.error
        import urllib.request

        from modelhooks.core.errors import Unavailable
        from modelhooks.delivery.encoding import binary

        msg = binary(event)
        req = urllib.request.Request(url, data=msg.body, headers=msg.headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                resp.read()
        except (urllib.error.URLError, OSError) as exc:
            raise Unavailable(f"sink {url} did not accept the reply: {exc}") from None

    return send


def reset() -> None:
    """Close and forget the cached wiring and settings (tests; a config reload)."""
    with _LOCK:
        while _BUILT:
            _close(_BUILT.popitem()[1])
    _default_settings.cache_clear()


def _close(app: App) -> None:
    for resource in (*app.deps.built().values(), app.delivery.dedupe.log):
        close = getattr(resource, "close", None)
        if callable(close):
            close()
