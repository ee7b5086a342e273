"""PostgreSQL 15 (throw-away cluster) + the Kubeflow Model Registry REST server.

postgres refuses to run as root: when we are root, initdb and postgres run as the
``postgres`` user through ``runuser``, on a data directory that user owns.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.servers._proc import Process, ServerFailed, free_port
from tests.servers.recipes import RECIPES

API_BASE = "/api/model_registry/v1alpha3"


@dataclass(frozen=True)
class ModelRegistry:
    """``url`` is the server root; ``api_url`` the REST base (``/api/model_registry/v1alpha3``).
    ``database_dsn`` points at the backing PostgreSQL database (user postgres, trust auth)."""

    url: str
    api_url: str
    database_dsn: str
    version: str
    log_files: tuple[Path, ...]


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def start_postgres(workdir: Path) -> tuple[str, Process]:
    pg = RECIPES["postgresql"]
    # Its own directory under the system temp dir: pytest's tmp dirs are private to root.
    pgdir = Path(tempfile.mkdtemp(prefix="modelhooks-postgres-"))
    data, sockets = pgdir / "data", pgdir / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        for path in (pgdir, sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    init = subprocess.run(
        _as_postgres(
            [
                str(pg.binary("initdb")),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        ),
        capture_output=True,
        text=True,
    )
    if init.returncode != 0:
        shutil.rmtree(pgdir, ignore_errors=True)
        raise ServerFailed(f"initdb failed ({init.returncode}):\n{init.stdout}\n{init.stderr}")
    port = free_port()
    process = Process(
        "postgres",
        _as_postgres(
            [
                str(pg.binary("postgres")),
                "-D",
                str(data),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-k",
                str(sockets),
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ]
        ),
        log_path=workdir / "postgres.log",
        stop_signal=signal.SIGINT,  # "fast" shutdown
        remove_after=pgdir,
    )
    ready = [str(pg.binary("pg_isready")), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres"]
    try:
        process.wait_ready(lambda: subprocess.run(ready, capture_output=True).returncode == 0)
        create = subprocess.run(
            [
                str(pg.binary("createdb")),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "postgres",
                "model_registry",
            ],
            capture_output=True,
            text=True,
        )
        if create.returncode != 0:
            raise ServerFailed(f"createdb failed: {create.stderr}")
    except BaseException:
        process.stop()
        raise
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=model_registry sslmode=disable"
    return dsn, process


def _healthy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/readyz/health", timeout=5) as response:
        return bool(response.status == 200)


def start_model_registry(workdir: Path) -> tuple[ModelRegistry, list[Process]]:
    dsn, postgres = start_postgres(workdir)
    port = free_port()
    recipe = RECIPES["model-registry"]
    server = Process(
        "model-registry",
        [
            recipe.binary(),
            "proxy",
            "--hostname",
            "127.0.0.1",
            "--port",
            str(port),
            "--datastore-type",
            "embedmd",
            "--embedmd-database-type",
            "postgres",
            "--embedmd-database-dsn",
            dsn,
        ],
        log_path=workdir / "model-registry.log",
        cwd=workdir,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        server.wait_ready(lambda: _healthy(url), timeout=90)
    except BaseException:
        server.stop()
        postgres.stop()
        raise
    info = ModelRegistry(
        url=url,
        api_url=url + API_BASE,
        database_dsn=dsn,
        version=recipe.version,
        log_files=(server.log_path, postgres.log_path),
    )
    return info, [postgres, server]
