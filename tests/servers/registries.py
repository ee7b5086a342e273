"""OCI registries on loopback: distribution 2.8 (docker-registry), distribution v3
(distribution3), zot (events extension) and cue-labs' in-memory registry (ociregistry: the
referrers API; it sends no notifications).

All post notifications to ``http://127.0.0.1:<notify_port>/<kind>-events`` with
``Authorization: Bearer <notify_token>``; the registry does not own that port, a test or a
function listens on it. distribution (both versions) retries undelivered notifications (so a listener
started later still receives them: filter by repository); zot sends CloudEvents.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.servers._proc import Process, free_port
from tests.servers.recipes import RECIPES


@dataclass(frozen=True)
class OciRegistry:
    """``url`` (http://127.0.0.1:P, no auth), ``host`` (127.0.0.1:P for references),
    ``kind`` ("docker-registry", "distribution3" or "zot") and the notification target described above."""

    kind: str
    url: str
    host: str
    notify_port: int
    notify_url: str
    notify_token: str
    log_files: tuple[Path, ...]


def _v2_ready(url: str, challenged: bool = False) -> bool:
    """`/v2/` answers 200, or (``challenged``: a registry with auth) 401 with a challenge."""
    try:
        with urllib.request.urlopen(f"{url}/v2/", timeout=5) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as exc:
        exc.close()
        if challenged and exc.code == 401 and exc.headers.get("WWW-Authenticate"):
            return True
        raise


def _notify_target(kind: str) -> tuple[int, str, str]:
    port = free_port()
    return port, f"http://127.0.0.1:{port}/{kind}-events", secrets.token_hex(16)


def _start_distribution(
    workdir: Path,
    kind: str,
    argv: list[str | Path],
    env: dict[str, str] | None = None,
    auth: dict[str, Any] | None = None,
) -> tuple[OciRegistry, list[Process]]:
    """distribution 2.8 and v3 read the same configuration (version 0.1); ``auth`` is its
    `auth:` section (e.g. ``TokenServer.registry_auth()``), none by default."""
    port = free_port()
    notify_port, notify_url, token = _notify_target(kind)
    config = {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text"},
        "storage": {
            "filesystem": {"rootdirectory": str(workdir / "data")},
            "delete": {"enabled": True},
            "cache": {"blobdescriptor": "inmemory"},
        },
        "http": {"addr": f"127.0.0.1:{port}", "secret": secrets.token_hex(16)},
        "notifications": {
            "endpoints": [
                {
                    "name": "modelhooks",
                    "url": notify_url,
                    "headers": {"Authorization": [f"Bearer {token}"]},
                    "timeout": "2s",
                    "threshold": 5,
                    "backoff": "1s",
                }
            ]
        },
    }
    if auth:
        config["auth"] = auth
    config_file = workdir / f"{kind}.yml"
    config_file.write_text(yaml.safe_dump(config))
    process = Process(
        kind, [*argv, "serve", config_file], log_path=workdir / f"{kind}.log", env=env
    )
    url = f"http://127.0.0.1:{port}"
    process.wait_ready(lambda: _v2_ready(url, challenged=bool(auth)), timeout=30)
    info = OciRegistry(
        kind, url, f"127.0.0.1:{port}", notify_port, notify_url, token, (process.log_path,)
    )
    return info, [process]


def start_docker_registry(workdir: Path) -> tuple[OciRegistry, list[Process]]:
    return _start_distribution(workdir, "docker-registry", [RECIPES["docker-registry"].binary()])


def start_distribution3(
    workdir: Path, auth: dict[str, Any] | None = None
) -> tuple[OciRegistry, list[Process]]:
    """distribution v3; ``auth``: its `auth:` section (token: ``TokenServer.registry_auth()``)."""
    # v3 exports OpenTelemetry traces by default (OTLP to localhost); keep it quiet.
    env = {"OTEL_TRACES_EXPORTER": "none"}
    return _start_distribution(
        workdir, "distribution3", [RECIPES["distribution3"].binary()], env=env, auth=auth
    )


def start_zot(workdir: Path) -> tuple[OciRegistry, list[Process]]:
    port = free_port()
    notify_port, notify_url, token = _notify_target("zot")
    config = {
        "distSpecVersion": "1.1.1",
        "storage": {"rootDirectory": str(workdir / "data"), "gc": True, "dedupe": False},
        "http": {"address": "127.0.0.1", "port": str(port)},
        "log": {"level": "info"},
        "extensions": {
            "events": {
                "enable": True,
                "sinks": [
                    {
                        "type": "http",
                        "address": notify_url,
                        "timeout": "2s",
                        "credentials": {"token": token},
                    }
                ],
            }
        },
    }
    config_file = workdir / "zot.json"
    config_file.write_text(json.dumps(config, indent=2))
    process = Process(
        "zot",
        [RECIPES["zot"].binary(), "serve", config_file],
        log_path=workdir / "zot.log",
    )
    url = f"http://127.0.0.1:{port}"
    process.wait_ready(lambda: _v2_ready(url), timeout=30)
    info = OciRegistry(
        "zot", url, f"127.0.0.1:{port}", notify_port, notify_url, token, (process.log_path,)
    )
    return info, [process]


def start_ociregistry(workdir: Path) -> tuple[OciRegistry, list[Process]]:
    """The referrers-capable registry (no notifications: notify_port is 0)."""
    port = free_port()
    process = Process(
        "ociregistry",
        [RECIPES["ociregistry"].binary(), "-addr", f"127.0.0.1:{port}"],
        log_path=workdir / "ociregistry.log",
    )
    url = f"http://127.0.0.1:{port}"
    process.wait_ready(lambda: _v2_ready(url), timeout=30)
    info = OciRegistry("ociregistry", url, f"127.0.0.1:{port}", 0, "", "", (process.log_path,))
    return info, [process]
