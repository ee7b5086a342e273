"""`modelhooks serve` answers HTTPS with the admission certificate and re-reads it when the
files change (a rotated Secret), without a restart; a half-written pair keeps the old one."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.servers._proc import free_port
from tests.servers.tls import CertificateAuthority, serving_pair

MODELHOOKS = str(Path(sys.executable).with_name("modelhooks"))


def served_name(port: int, ca: CertificateAuthority) -> str:
    """The common name of the certificate a new connection is served (no SNI, as the
    apiserver calling https://127.0.0.1:PORT sends none)."""
    context = ssl.create_default_context(cafile=str(ca.cert_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        subject = dict(x[0] for x in tls.getpeercert()["subject"])
        return str(subject["commonName"])


@pytest.fixture
def pki(tmp_path: Path) -> tuple[CertificateAuthority, Path, Path]:
    return serving_pair(tmp_path)


def test_the_certificate_is_reloaded_when_its_files_change(
    pki: tuple[CertificateAuthority, Path, Path], tmp_path: Path
) -> None:
    ca, cert, key = pki
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    env.update(
        MODELHOOKS_ADMISSION_TLS_CERT_FILE=str(cert),
        MODELHOOKS_ADMISSION_TLS_KEY_FILE=str(key),
        MODELHOOKS_SERVE_FUNCTIONS="admission",
        MODELHOOKS_SERVE_WATCH_INTERVAL="0",
    )
    argv = [MODELHOOKS, "serve", "--port", str(port), "--home", str(tmp_path / "home")]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                assert served_name(port, ca) == "first"
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        # whole answers, body included, on kept-alive connections (the body of every answer
        # once hung over TLS: the write-buffer limit serve sets for plain TCP)
        context = ssl.create_default_context(cafile=str(ca.cert_file))
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
        for _ in range(3):
            connection.request("GET", "/healthz")
            assert json.loads(connection.getresponse().read())["functions"] == ["admission"]
        connection.close()
        # a rotation: the Secret's files replaced (here one after the other)
        second_cert, second_key = ca.issue("second", tmp_path / "second")
        shutil.copy(second_key, key)
        shutil.copy(second_cert, cert)
        assert served_name(port, ca) == "second"
        cert.write_text("-----BEGIN CERTIFICATE-----\nhalf")  # half-written: keep serving
        assert served_name(port, ca) == "second"
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "admission certificate reloaded" in log.read_text()


def test_a_missing_or_unusable_pair_stops_start_up_naming_the_setting(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELHOOKS_")}
    env.update(
        MODELHOOKS_ADMISSION_TLS_CERT_FILE=str(tmp_path / "absent.crt"),
        MODELHOOKS_ADMISSION_TLS_KEY_FILE=str(tmp_path / "absent.key"),
    )
    argv = [MODELHOOKS, "serve", "--port", str(free_port()), "--home", str(tmp_path / "home")]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "MODELHOOKS_ADMISSION_TLS_CERT_FILE" in done.stderr
