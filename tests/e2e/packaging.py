"""Helpers for the packaging tests: the wheel built once per session, fresh venvs outside
the repository (cached by what they install), functions-framework targets run from them,
and real-shaped CloudEvents to send to what they run."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from modelhooks.events import samples

VENV_TIMEOUT = 600
# Venvs installed as users install them, kept by what they install (the requirements with
# the wheel's content, not its name): a rerun over unchanged code reuses them.
VENVS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "modelhooks" / "venvs"
KEEP = 8  # the most recently used venvs kept; older ones are removed


def wheel_digest(wheel: Path) -> str:
    """A digest of what the wheel holds (its files' names and bytes, not the zip's times)."""
    h = hashlib.sha256()
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            h.update(name.encode() + b"\0" + hashlib.sha256(z.read(name)).digest())
    return h.hexdigest()


def folder_key(folder: Path) -> str:
    """What a Cloud Run source folder's venv depends on: its requirements.txt, with each
    wheel it names replaced by that wheel's content digest."""
    text = (folder / "requirements.txt").read_text()
    for wheel in sorted(folder.glob("*.whl")):
        text = text.replace(wheel.name, wheel_digest(wheel))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cached_venv(key: str, *requirements: str, cwd: Path | None = None) -> Path:
    """`fresh_venv` kept under VENVS/<key> (a venv cannot move: it is made in place, under a
    lock, and marked complete last); its bin/ dir."""
    VENVS.mkdir(parents=True, exist_ok=True)
    where = VENVS / key
    with (VENVS / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (where / ".complete").exists():
            shutil.rmtree(where, ignore_errors=True)
            fresh_venv(where, *requirements, cwd=cwd)
            (where / ".complete").touch()
        os.utime(where)
        if key not in _IN_USE:  # taken under the lock: no prune is between its check and us
            _IN_USE[key] = (VENVS / f"{key}.use").open("w")
            fcntl.flock(_IN_USE[key], fcntl.LOCK_SH)
    _prune_venvs()
    return where / "bin"


# Each venv this process was given, its <key>.use file held with a shared lock until the
# process ends: another process's prune removes none of them while this one runs them (it
# removed a bench's venv between its runs: FileNotFoundError .../bin/functions-framework).
_IN_USE: dict[str, Any] = {}


def _prune_venvs() -> None:
    """Remove the venvs past the KEEP most recently used that no process uses, each with its
    <key>.use file (and a <key>.use left by a venv removed before, its venv gone): they
    were left behind, one per venv ever made. Not the <key>.lock: a process may be waiting
    on it, and one made anew would be a second lock for the same venv."""
    kept = sorted((p for p in VENVS.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    left = [VENVS / u.stem for u in VENVS.glob("*.use") if not (VENVS / u.stem).is_dir()]
    for old in [*kept[:-KEEP], *left]:
        with (VENVS / f"{old.name}.lock").open("w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being made or checked by another session
            if old.name in _IN_USE or (old in left and old.is_dir()):
                continue  # in use here; or made again since it was seen gone
            use = VENVS / f"{old.name}.use"
            with use.open("w") as held:
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # in use by another process
                shutil.rmtree(old, ignore_errors=True)
                # under both locks: no process holds it, and none opens it but under the .lock
                use.unlink(missing_ok=True)


def fresh_venv(where: Path, *requirements: str, cwd: Path | None = None) -> Path:
    """A new venv at `where` with `requirements` installed (pip arguments); its bin/ dir."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    bin_dir = where / "bin"
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", *requirements],
        check=True,
        cwd=cwd,
        timeout=VENV_TIMEOUT,
    )
    return bin_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pushed_event() -> tuple[dict[str, str], bytes]:
    """The canonical artifact.pushed sample, in binary mode: (headers, body)."""
    doc = samples.load("canonical-artifact-pushed")
    assert isinstance(doc, dict)
    headers = {f"ce-{k}": str(v) for k, v in doc.items() if k not in ("data", "datacontenttype")}
    headers["Content-Type"] = "application/json"
    return headers, json.dumps(doc["data"]).encode()


def post(
    url: str, headers: dict[str, str], body: bytes, timeout: float = 60
) -> tuple[int, dict[str, str], bytes]:
    """POST, retrying while the server is still starting; (status, headers, body)."""
    deadline = time.monotonic() + timeout
    while True:
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers.items()), e.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def binary(doc: Mapping[str, Any]) -> tuple[dict[str, str], bytes]:
    """A structured CloudEvent document as binary mode, as Eventarc and Knative send one:
    its attributes as ce-* headers, its data the body."""
    headers = {f"ce-{k}": str(v) for k, v in doc.items() if k not in ("data", "datacontenttype")}
    headers["Content-Type"] = str(doc.get("datacontenttype", "application/json"))
    return headers, json.dumps(doc["data"]).encode()


@contextlib.contextmanager
def target(
    bin_dir: Path, folder: Path, name: str, env: Mapping[str, str], log: Path
) -> Iterator[str]:
    """`functions-framework --target name` run from `folder` with `bin_dir`'s venv, as Cloud
    Run runs a source folder; yields its URL once /healthz answers."""
    port = free_port()
    command = [str(bin_dir / "functions-framework"), "--target", name, "--port", str(port)]
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(folder), **env}
    with (
        log.open("wb") as out,
        subprocess.Popen(command, cwd=folder, env=environ, stderr=out, stdout=out) as proc,
    ):
        try:
            url = f"http://127.0.0.1:{port}/"
            wait_healthy(url, proc, log)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "healthz", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"not healthy after {timeout} s:\n{log.read_text()[-3000:]}")


DOCKERFILE = Path(__file__).resolve().parents[2] / "infra" / "image" / "Dockerfile"


def build_image(podman: Any, work: Path) -> str:
    """The image `make image` builds (infra/image/Dockerfile) on the mmdebstrap base (the
    Dockerfile's BASE swapped, nothing else), offline from a staged wheelhouse; its tag."""
    import uuid

    from tests.tools.image_context import stage

    context = stage(work / "context", with_dependencies=True)
    tag = f"localhost/modelhooks-test:{uuid.uuid4().hex[:8]}"
    built = podman(
        "build",
        "--network=host",
        "-f", str(DOCKERFILE),
        "--build-arg", f"BASE={podman.base_image()}",
        "--build-arg", "PIP_NO_INDEX=1",
        "-t", tag,
        str(context),
        check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return tag
