"""The composition root: settings → adapters → `Deps`, built once per process.

Nothing is built at import time; heavy SDKs are imported by the adapter that needs them.
Tests call `build(settings, registry=fake, …)` to swap any dependency.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from modelhooks.core.logs import configure as configure_logs
from modelhooks.core.ports import ModelRegistry, Signer
from modelhooks.core.settings import Settings, load_settings
from modelhooks.core.stores import Stores
from modelhooks.delivery.routes import RouteAuth
from modelhooks.delivery.runtime import Dedupe
from modelhooks.delivery.tenancy import Tenancy
from modelhooks.events.layout import ObjectLayout
from modelhooks.events.model import CanonicalEvent

if TYPE_CHECKING:
    from modelhooks.adapters.signing.streaming import HashOptions

__all__ = ["Deps", "build"]

Sink = Callable[[CanonicalEvent], None]


@dataclass(frozen=True)
class Deps:
    settings: Settings
    registry: ModelRegistry
    stores: Stores
    layout: ObjectLayout
    tenancy: Tenancy
    dedupe: Dedupe
    auth: RouteAuth
    sink: Sink | None
    signer: Signer | None = None
    signing: HashOptions | None = None


def build(settings: Settings | None = None, **overrides: Any) -> Deps:
    """The process's dependencies (cached per settings); `overrides` replace fields."""
    deps = _build(settings) if settings is not None else _default_deps()
    return dataclasses.replace(deps, **overrides) if overrides else deps


@lru_cache(maxsize=1)
def _default_deps() -> Deps:
    return _build(_default_settings())


@lru_cache(maxsize=1)
def _default_settings() -> Settings:
    return load_settings()


@lru_cache(maxsize=8)
def _build(settings: Settings) -> Deps:
    configure_logs(settings.log_level)
    return Deps(
        settings=settings,
        registry=_registry(settings),
        stores=Stores(settings),
        layout=settings.layout.object_layout(),
        tenancy=Tenancy.parse(settings.tenancy.tenants),
        dedupe=Dedupe(settings.ingress.dedupe_size),
        auth=RouteAuth.from_settings(settings.ingress.auth, settings.ingress.route_auth),
        sink=_http_sink(settings.router.sink) if settings.router.sink else None,
        **_signing(settings),
    )


def _signing(settings: Settings) -> dict[str, Any]:
    """The signer (None when signing is off, by the enabling rule) and hashing options."""
    config = settings.signing.config(ready_marker=settings.layout.marker)
    return {"signer": config.signer(), "signing": config.options()}


def _registry(settings: Settings) -> ModelRegistry:
    if settings.registry.backend == "kubeflow":
        from modelhooks.adapters.model_registry.kubeflow import KubeflowModelRegistry
        from modelhooks.events.auth import resolve_value

        token = settings.registry.token
        return KubeflowModelRegistry(
            settings.registry.url,
            token=resolve_value(token, "MODELHOOKS_REGISTRY_TOKEN") if token else None,
        )
    from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry

    return SqliteModelRegistry(settings.home / "registry.db")


def _http_sink(url: str) -> Sink:
    def send(event: CanonicalEvent) -> None:
        import urllib.error
        import urllib.request

        from modelhooks.core.errors import Unavailable
        from modelhooks.delivery.runtime import binary

        msg = binary(event)
        req = urllib.request.Request(url, data=msg.body, headers=msg.headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                resp.read()
        except (urllib.error.URLError, OSError) as exc:
            raise Unavailable(f"sink {url} did not accept the reply: {exc}") from None

    return send


def reset() -> None:
    """Close and forget the cached dependencies and settings (tests; a config reload)."""
    built = [_default_deps()] if _default_deps.cache_info().currsize else []
    for deps in built:
        close = getattr(deps.registry, "close", None)
        if callable(close):
            close()
    _default_settings.cache_clear()
    _default_deps.cache_clear()
    _build.cache_clear()
