"""Typed settings, validated at start, from one place.

Precedence: command-line flags > environment > config file > defaults. Every setting has
an environment variable (`MODELHOOKS_<SECTION>_<NAME>`, a few platform ones such as
`K_SINK` too) and a flag (`--<section>-<name>`); the config file (YAML, `--config` /
`MODELHOOKS_CONFIG`, default `$MODELHOOKS_HOME/config.yaml` when it exists) uses the
nested names. A bad value fails start-up with a ConfigError naming the variable.

>>> load_settings(env={"MODELHOOKS_LAYOUT_MARKER": "READY"}).layout.marker
'READY'
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from events.layout import ObjectLayout
from functions.errors import ConfigError

__all__ = ["SettingSpec", "Settings", "describe", "load_settings"]

PREFIX = "MODELHOOKS_"


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RegistrySettings(_Section):
    backend: Literal["sqlite"] = Field(
        "sqlite", description="where registrations go: sqlite ($MODELHOOKS_HOME/registry.db)"
    )


class StoreSettings(_Section):
    backend: Literal["local", "cloud"] = Field(
        "local",
        description="local: every bucket is a directory under $MODELHOOKS_HOME/store; "
        "cloud: gs:// goes to GCS and s3:// to S3",
    )
    s3_endpoint_url: str = Field("", description="S3 endpoint (MinIO, other S3-compatible)")


class LayoutSettings(_Section):
    pattern: str = Field(
        "models/{name}/{version}/", description="where a model version lives in a bucket"
    )
    marker: str = Field("_SUCCESS", description="the file whose arrival means 'pushed'")

    @field_validator("pattern")
    @classmethod
    def _valid_pattern(cls, value: str) -> str:
        ObjectLayout(pattern=value)
        return value

    @field_validator("marker")
    @classmethod
    def _valid_marker(cls, value: str) -> str:
        ObjectLayout(marker=value)
        return value

    def object_layout(self) -> ObjectLayout:
        return ObjectLayout(pattern=self.pattern, marker=self.marker)

    def prefix_for(self, name: str, version: str) -> str:
        return self.object_layout().prefix(name, version)


class IngressSettings(_Section):
    max_body_bytes: int = Field(1 << 20, gt=0, description="larger deliveries get 413")
    auth: str = Field(
        "none", description="delivery authentication spec: none, oidc:…, hmac:…, bearer:…"
    )
    registry_host: str = Field(
        "", description="the OCI registry host zot's events come from (zot does not name it)"
    )
    dedupe_size: int = Field(
        10_000, ge=0, description="recent event ids remembered per process (0 = off)"
    )


class RouterSettings(_Section):
    triggers: Path | None = Field(
        None, description="directory of Knative Trigger YAML (default: the repo's infra/knative)"
    )
    max_depth: int = Field(8, ge=1, le=64, description="reply hops followed by `serve`")
    sink: str = Field(
        "",
        description="where replies are POSTed instead of answered (SinkBinding)",
        json_schema_extra={"env": "K_SINK"},
    )


class ServeSettings(_Section):
    host: str = Field(
        "127.0.0.1",
        description="`modelhooks serve` listen address",
        json_schema_extra={"flag": "--host"},
    )
    port: int = Field(
        8080,
        ge=0,
        le=65535,
        description="listen port (0 = any free port)",
        json_schema_extra={"env": "PORT", "flag": "--port"},
    )
    watch_interval: float = Field(
        1.0,
        ge=0,
        description="seconds between scans of the local store for ready markers (0 = off)",
    )


class TenancySettings(_Section):
    tenants: str = Field(
        "",
        description="namespace=pattern,pattern;… buckets/repositories each namespace may "
        "act on (glob); empty = no tenancy checks",
    )


class Settings(_Section):
    home: Path = Field(Path(".modelhooks"), description="embedded state: store/, registry.db, keys")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="log threshold"
    )
    registry: RegistrySettings = RegistrySettings()
    store: StoreSettings = StoreSettings()
    layout: LayoutSettings = LayoutSettings()
    ingress: IngressSettings = IngressSettings()
    router: RouterSettings = RouterSettings()
    serve: ServeSettings = ServeSettings()
    tenancy: TenancySettings = TenancySettings()


class SettingSpec(BaseModel):
    """One row of the settings table."""

    path: tuple[str, ...]
    env: str
    flag: str
    default: Any
    description: str

    @property
    def name(self) -> str:
        return ".".join(self.path)


def describe(
    model: type[BaseModel] = Settings, path: tuple[str, ...] = ()
) -> Iterator[SettingSpec]:
    """Every leaf setting with its env var, flag and default (the README table)."""
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from describe(ann, (*path, name))
            continue
        full = (*path, name)
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        env = str(extra.get("env") or PREFIX + "_".join(full).upper())
        yield SettingSpec(
            path=full,
            env=env,
            flag=str(extra.get("flag") or "--" + "-".join(full).replace("_", "-")),
            default=field.default,
            description=field.description or "",
        )


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

    def put(path: tuple[str, ...], value: Any, where: str) -> None:
        node = merged
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
        origin[path] = where

    from_env = {s.path: (s.env, env[s.env]) for s in specs if env.get(s.env, "") != ""}
    home = Path(args.get("home") or env.get(PREFIX + "HOME") or Settings().home)
    path = config_file or (Path(env[PREFIX + "CONFIG"]) if env.get(PREFIX + "CONFIG") else None)
    if path is None and (home / "config.yaml").is_file():
        path = home / "config.yaml"
    if path is not None:
        for keys, value in _flatten(_read_yaml(path)):
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
        return Settings.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(str(p) for p in err["loc"])
        where = origin.get(loc) or ".".join(loc)
        raise ConfigError(f"invalid setting {where}: {err['msg']}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings")
    return doc


def _flatten(
    doc: Mapping[str, Any], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    for key, value in doc.items():
        if isinstance(value, Mapping):
            yield from _flatten(value, (*path, str(key)))
        else:
            yield (*path, str(key)), value
