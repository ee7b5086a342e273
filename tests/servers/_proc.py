"""Running one server process: ephemeral loopback ports, a log file, readiness, clean stop."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


class ServerFailed(RuntimeError):
    """A server did not start or did not become ready; the message carries its log tail."""


_handed_out: set[int] = set()


def free_port() -> int:
    """An ephemeral loopback port, free right now and not handed out before in this process
    (notification ports stay unbound until a test listens, so the kernel could reuse them)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def log_tail(path: Path, lines: int = 80) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Process:
    """A server subprocess in its own process group, its output going to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stop_signal: int = signal.SIGTERM,
        remove_after: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.stop_signal = stop_signal
        self.remove_after = remove_after  # a directory deleted once the process has stopped
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log.write(f"$ {shlex.join(self.argv)}\n".encode())
        self._log.flush()
        self.started = time.monotonic()
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            raise ServerFailed(f"{name}: cannot run {self.argv[0]}: {exc}") from exc

    @property
    def pid(self) -> int:
        return self._popen.pid

    def alive(self) -> bool:
        return self._popen.poll() is None

    def wait_ready(self, probe: Callable[[], bool], timeout: float = 60.0) -> float:
        """Poll ``probe`` until true; fail early if the process exits. Returns seconds taken.
        A process that never gets ready (or an interrupted wait) is stopped before raising."""
        try:
            return self._poll(probe, timeout)
        except BaseException:
            self.stop()
            raise

    def _poll(self, probe: Callable[[], bool], timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServerFailed(
                    f"{self.name} exited with {self._popen.returncode} before it was ready; "
                    f"log {self.log_path}:\n{log_tail(self.log_path)}"
                )
            with contextlib.suppress(Exception):
                if probe():
                    return time.monotonic() - self.started
            time.sleep(0.1)
        raise ServerFailed(
            f"{self.name} not ready after {timeout:.0f}s; log {self.log_path}:\n"
            f"{log_tail(self.log_path)}"
        )

    def stop(self, timeout: float = 15.0) -> None:
        try:
            if self.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._popen.pid, self.stop_signal)
                try:
                    self._popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self._popen.pid, signal.SIGKILL)
                    self._popen.wait()
            else:
                self._popen.wait()
        finally:
            self._log.close()
            if self.remove_after is not None:
                shutil.rmtree(self.remove_after, ignore_errors=True)
