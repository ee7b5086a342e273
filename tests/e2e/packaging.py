"""Helpers for the packaging tests: the wheel built once per session, fresh venvs outside
the repository, and a canonical CloudEvent to send to what they run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from modelhooks.events import samples

VENV_TIMEOUT = 600


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
