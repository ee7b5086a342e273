"""`serve` and `dead-letter` on any free port (--port 0) at a host that is not this
machine's: a configuration error before anything starts, as with a fixed port."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("command", ["serve", "dead-letter"])
@pytest.mark.parametrize(
    ("host", "why"),
    [("no-such-host.invalid", ""), ("192.0.2.1", "Cannot assign requested address")],
)
def test_a_host_not_of_this_machine_is_a_configuration_error(
    home: Path, command: str, host: str, why: str
) -> None:
    """It failed only when the server bound: os_error, exit 3 (transient: 'retry')."""
    modelhooks = Path(sys.executable).with_name("modelhooks")
    done = subprocess.run(
        [str(modelhooks), command, "--host", host, "--port", "0", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"config_error: cannot listen on {host}:0: {why}"), done.stderr
    assert "setting: serve.host, serve.port" in done.stderr
