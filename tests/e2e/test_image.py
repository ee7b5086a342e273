"""The container image (infra/image/Dockerfile) as the Knative Services run it: built with
podman on the mmdebstrap base (the Dockerfile's BASE swapped, nothing else), offline from a
staged wheelhouse, run with runc on the host network, and sent a CloudEvent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.packaging import DOCKERFILE, free_port, post, pushed_event
from tests.servers.containers import Podman

pytestmark = pytest.mark.e2e


def run_container(podman: Podman, image: str, port: int, *command: str) -> str:
    started = podman(
        "run", "-d", "--rm", "--network=host", "-e", f"PORT={port}", image, *command
    )  # fmt: skip
    return started.stdout.strip()


@pytest.mark.parametrize(
    "command",
    [
        ("functions-framework", "--target", "register", "--signature-type", "http"),
        (),  # the default command: modelhooks serve
    ],
    ids=["functions-framework-register", "modelhooks-serve"],
)
def test_the_image_answers_a_cloudevent(
    podman: Podman, image: str, command: tuple[str, ...]
) -> None:
    port = free_port()
    container = run_container(podman, image, port, *command)
    try:
        headers, body = pushed_event()
        # named by its content, as the ingress hands a push on (the image's store is empty)
        data = {**json.loads(body), "digest": f"content-sha256:{'0' * 64}"}
        status, answer_headers, answer = post(
            f"http://127.0.0.1:{port}/", headers, json.dumps(data).encode()
        )
        logs = podman("logs", container, check=False)
        assert status == 200, (answer, logs.stdout[-2000:], logs.stderr[-2000:])
        if command:  # one function: the reply is a binary-mode CloudEvent
            assert answer_headers["ce-type"] == "dev.modelhooks.model.registered"
        else:  # the broker: every outcome of the chain
            assert "register" in {o["function"] for o in json.loads(answer)["outcomes"]}
        user = podman("exec", container, "id", "-u")
        assert user.stdout.strip() == "65532"  # not root
    finally:
        podman("rm", "-f", container, check=False)


def test_the_image_build_swaps_only_the_base() -> None:
    """Users build FROM a public Python base; the test passes BASE and PIP_NO_INDEX only."""
    text = Path(DOCKERFILE).read_text()
    assert "ARG BASE=python:3.11-slim" in text
    assert text.count("FROM ${BASE}") == 2


def test_the_image_ships_the_bytecode_of_what_a_function_imports(
    podman: Podman, image: str
) -> None:
    """The image runs with PYTHONDONTWRITEBYTECODE as a non-root user: a module whose bytecode
    it does not ship is compiled from its source at every start (register's cold start took
    430 ms of CPU, not 180, with none shipped)."""
    check = (
        "import importlib.util, os, sys\n"
        "os.environ['FUNCTION_TARGET'] = 'sign'\n"
        "import functions_framework, modelhooks.main, cryptography.hazmat.primitives.asymmetric.ec\n"
        "from modelhooks.adapters.signing import model\n"
        "mine = [m.__file__ for m in list(sys.modules.values())\n"
        "        if (getattr(m, '__file__', None) or '').startswith('/opt/modelhooks/')\n"
        "        and m.__file__.endswith('.py')]\n"
        "print(len(mine), [f for f in mine\n"
        "     if not os.path.exists(importlib.util.cache_from_source(f))][:20])\n"
    )
    shown = podman(
        "run", "--rm", "--network=host", image, "/opt/modelhooks/bin/python", "-c", check
    )
    count, _, missing = shown.stdout.strip().partition(" ")
    assert int(count) > 100, shown.stdout  # functions-framework, flask, modelhooks, …
    assert missing == "[]", f"imported without shipped bytecode: {missing}"
