"""The package as its users install it: the wheel alone in a fresh venv outside the
repository (`modelhooks serve` routes by the Trigger YAML it carries), and the Cloud Run
functions source folder of each function (main.py + requirements.txt + the wheel)."""

from __future__ import annotations

import json
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelhooks.handlers import NAMES
from tests.e2e.packaging import free_port, fresh_venv, post, pushed_event
from tests.tools.cloud_run_sources import build_wheel, write_sources

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_holds_the_modelhooks_namespace_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"modelhooks", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    assert "modelhooks/triggers.yaml" in names
    assert "modelhooks/events/schemas/dev.modelhooks.artifact.pushed.v1.json" in names
    assert not [n for n in names if "/tests/" in n or n.startswith("tests")]


@pytest.fixture
def served(wheel: Path, tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """`modelhooks serve` from a fresh venv, run in a directory outside the repository."""
    bin_dir = fresh_venv(tmp_path / "venv", str(wheel))
    port, home = free_port(), tmp_path / "home"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MODELHOOKS_HOME": str(home), "PORT": str(port)}
    log = (tmp_path / "serve.log").open("wb")
    with (
        log,
        subprocess.Popen(
            [str(bin_dir / "modelhooks"), "serve"], cwd=tmp_path, env=env, stderr=log, stdout=log
        ) as proc,
    ):
        try:
            yield f"http://127.0.0.1:{port}/", bin_dir, home
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_installed_serve_registers_an_event_through_its_triggers(
    served: tuple[str, Path, Path], tmp_path: Path
) -> None:
    url, bin_dir, home = served
    headers, body = pushed_event()
    status, _, answer = post(url, headers, body)
    assert status == 200, answer
    outcomes = json.loads(answer)["outcomes"]
    assert {o["function"] for o in outcomes} >= {"register"}, outcomes
    listed = subprocess.run(
        [str(bin_dir / "modelhooks"), "registry", "list", "--json"],
        env={"MODELHOOKS_HOME": str(home)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = json.loads(listed.stdout)
    data = json.loads(body)
    assert [(r["model"], r["version"]) for r in rows] == [(data["model"], data["version"])]


@pytest.mark.parametrize("name", NAMES)
def test_each_cloud_run_source_serves_its_target_from_a_fresh_venv(
    wheel: Path, tmp_path: Path, name: str
) -> None:
    folder = write_sources(wheel, tmp_path / "sources")[name]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["main.py", "requirements.txt", wheel.name]
    )
    bin_dir = fresh_venv(tmp_path / "venv", "-r", "requirements.txt", cwd=folder)
    port = free_port()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MODELHOOKS_HOME": str(tmp_path / "home")}
    command = [str(bin_dir / "functions-framework"), "--target", name, "--port", str(port)]
    log = tmp_path / "functions-framework.log"
    with (
        log.open("wb") as out,
        subprocess.Popen(command, cwd=folder, env=env, stderr=out, stdout=out) as proc,
    ):
        try:
            headers, body = pushed_event()
            status, _, answer = post(f"http://127.0.0.1:{port}/", headers, body)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert status in (200, 204), (answer, log.read_text()[-3000:])
