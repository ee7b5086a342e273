"""The READMEs' command blocks, walked as a newcomer follows them.

The README's "Try it" blocks (marked `<!-- readme-test: NAME -->`) run from a checkout-like
directory (`.venv` and `events/` of this one) against `modelhooks serve` started as `make
run` starts it, command by command, each expected to succeed; only the port differs (a free
one for 8080).

Then every other ```sh block of README.md, infra/README.md and terraform/gcp/README.md:
each command is run verbatim (infra's kubectl against a fresh harness kube-apiserver, replays
against `modelhooks serve`) or, where it cannot run here (`gcloud`, `terraform apply`, a
pod), checked another way, the reason said (tests/e2e/docs_walk.py holds the rules; a
command no rule claims fails). Run with `-s` to see what was run and what was checked."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import docs_walk
from tests.e2e.conftest import Served
from tests.e2e.docs_walk import TRY_IT, Walk
from tests.e2e.packaging import free_port
from tests.servers.kube import KubeApiServer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK = re.compile(r"<!-- readme-test: (?P<name>\w+) -->\n```sh\n(?P<body>.*?)```", re.S)


def blocks() -> dict[str, list[str]]:
    text = (ROOT / "README.md").read_text()
    return {m["name"]: m["body"].strip().splitlines() for m in BLOCK.finditer(text)}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "events").symlink_to(ROOT / "events")
    return tmp_path


class Server:
    def __init__(self, cwd: Path, port: int) -> None:
        self.cwd, self.port = cwd, port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, run_args: str = "") -> None:
        """What `make run RUN_ARGS=…` runs (Makefile: HOST, PORT)."""
        argv = [".venv/bin/modelhooks", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with (self.cwd / "serve.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [*argv, *shlex.split(run_args)], cwd=self.cwd, stdout=log, stderr=log
            )
        run_until(self.cwd, f"curl -sf http://127.0.0.1:{self.port}/healthz", lambda out: True)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def server(checkout: Path) -> Iterator[Server]:
    server = Server(checkout, free_port())
    yield server
    server.stop()


def run(cwd: Path, line: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True)


def run_until(cwd: Path, line: str, ok: Callable[[str], bool], timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while True:
        done = run(cwd, line)
        if done.returncode == 0 and ok(done.stdout):
            return done.stdout
        if time.monotonic() > deadline:
            raise AssertionError(f"{line!r} did not succeed:\n{done.stdout}\n{done.stderr}")
        time.sleep(0.3)


def test_the_try_it_section_works_as_written(checkout: Path, server: Server) -> None:
    steps = blocks()
    assert tuple(steps) == TRY_IT, steps
    port = str(server.port)
    server.start()

    for line in steps["drop"]:  # verbatim, once each: the block itself waits for the scan
        done = run(checkout, line)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    assert "demo" in done.stdout, f"the drop block's last line does not list demo:\n{done.stdout}"

    for line in steps["replay"]:
        done = run(checkout, line.replace("8080", port))
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"

    for line in steps["sign"]:
        if line.startswith("make run"):  # stop the first server, start it with the key
            server.stop()
            server.start(re.search(r'RUN_ARGS="([^"]*)"', line)[1])  # type: ignore[index]
            continue
        run_until(checkout, line, lambda out: True)
    upstream = (
        ".venv/bin/model_signing verify key .modelhooks/store/models/models/demo/1 "
        "--signature .modelhooks/store/models/models/demo/1/model.sig "
        "--public_key .modelhooks/key.pub"
    )
    assert upstream in (ROOT / "README.md").read_text()
    assert run(checkout, upstream).returncode == 0


def test_make_help_lists_what_the_readme_names_with_values_not_variables() -> None:
    listed = subprocess.run(["make", "help"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "$(" not in listed.stdout, listed.stdout
    targets = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    named = re.search(r"`make help` lists the other targets \(([^)]*)\)", README.read_text())
    assert named, "README.md no longer says which targets `make help` lists"
    assert set(re.findall(r"`([a-z-]+)`", named[1])) <= targets, listed.stdout


def test_contributing_names_every_function() -> None:
    from modelhooks.handlers import NAMES

    text = (ROOT / "CONTRIBUTING.md").read_text()
    (handlers,) = re.findall(r"^  handlers/ .*\n(?:  {20,}.*\n)*", text, re.M)
    assert all(re.search(rf"\b{name}\b", handlers) for name in NAMES), (NAMES, handlers)


# --- every command block of the three READMEs ------------------------------------------------


@pytest.mark.parametrize("doc", docs_walk.DOCS)
def test_every_command_of_the_docs_is_run_or_checked(doc: str) -> None:
    """No command without a rule: a new block is walked, or says why it cannot be."""
    found = docs_walk.commands(doc)
    assert found, f"{doc}: no ```sh block"
    for command in found:
        docs_walk.rule_for(command)


def walk_all(doc: str, walk: Walk) -> None:
    for command in docs_walk.commands(doc):
        docs_walk.rule_for(command).apply(command, walk)
    print(f"\n{doc}:", *walk.done, sep="\n  ")


def test_readme_walked() -> None:
    walk_all("README.md", Walk(ROOT))


@pytest.fixture(scope="session")
def kubectl() -> Path:
    """kubectl of the apiserver's release, built by the harness (`make servers`)."""
    from tests.servers.recipes import RECIPES

    recipe = RECIPES["kubectl"]
    if not recipe.installed():
        pytest.fail("kubectl is not built: run `make servers`", pytrace=False)
    return recipe.binary()


def kube_walk(cwd: Path, kube: KubeApiServer, kubectl: Path) -> Walk:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(kubectl.parent), str(ROOT / ".venv" / "bin"), env["PATH"]])
    env["KUBECONFIG"] = str(kube.write_kubeconfig(cwd / "kubeconfig"))
    env.pop("MODELHOOKS_HOME", None)
    if kubectl.name != "kubectl":  # the harness caches it as kubectl-<version>
        (cwd / "bin").mkdir(exist_ok=True)
        (cwd / "bin" / "kubectl").symlink_to(kubectl)
        env["PATH"] = f"{cwd / 'bin'}{os.pathsep}{env['PATH']}"
    return Walk(cwd, env)


KNATIVE_SERVING_CONFIG = """
apiVersion: v1
kind: Namespace
metadata: {name: knative-serving}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: config-features, namespace: knative-serving}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: config-defaults, namespace: knative-serving}
---
apiVersion: v1
kind: Namespace
metadata: {name: ml}
"""


def dead_letter_copy(folder: Path) -> None:
    """What `kubectl cp` copies out of the dead-letter pod: the sink's own files, written by
    its code (modelhooks.delivery.dead_letter) for an event the Broker gave up on."""
    from modelhooks.delivery.dead_letter import DeadLetterStore, records

    body = (ROOT / "events" / "samples" / "canonical-artifact-pushed.json").read_bytes()
    headers = {"Content-Type": "application/cloudevents+json"}
    event = records(headers, body)[0]
    event.update(knativeerrorcode="500", knativeerrordest="http://modelhooks-register.modelhooks")
    DeadLetterStore(folder).store([event])


def test_infra_readme_walked(
    checkout: Path,
    own_kube_apiserver: tuple[KubeApiServer, list[Any]],
    kubectl: Path,
    serve: Callable[..., Served],
) -> None:
    """infra/README.md on a fresh kube-apiserver of its own (a user's cluster, nothing of
    modelhooks in it; the shared one is left alone): what Knative Serving's install leaves
    (its namespace and ConfigMaps) and a team's namespace `ml` exist first, as the README
    assumes; the dead-letter replay goes to `modelhooks serve` on the forwarded port."""
    (checkout / "infra").symlink_to(ROOT / "infra")
    walk = kube_walk(checkout, own_kube_apiserver[0], kubectl)
    prepare = [
        f"kubectl apply -f - <<'EOF'\n{KNATIVE_SERVING_CONFIG}\nEOF",
        "openssl ecparam -name prime256v1 -genkey -noout -out private-key.pem",
        "printf 'policies: []\\n' > prune-policies.yaml",
        "printf 'policies: []\\n' > cleanup-policies.yaml",
    ]
    for line in prepare:
        done = walk.sh(line)
        assert done.returncode == 0, f"{line}\n{done.stderr}"
    dead_letter_copy(checkout / "dead-letter")
    served = serve(free_port())
    walk.substitutions.update(
        {
            "…": "example",
            "<registry>": "registry.example.com",
            "<tag>": "0.1.0",
            "127.0.0.1:8080": served.url.removeprefix("http://"),
        }
    )
    walk_all("infra/README.md", walk)


def test_terraform_readme_walked(checkout: Path, serve: Callable[..., Served]) -> None:
    """terraform/gcp/README.md: what cannot reach Google Cloud is checked against the .tf
    files; the dead-letter replay runs on what `gcloud pubsub subscriptions pull
    --format=json` prints, sent to `modelhooks serve`'s register."""
    shutil.copytree(ROOT / "terraform", checkout / "terraform")
    served = serve(free_port())
    sample = json.loads((ROOT / "events" / "samples" / "gar-insert.json").read_text())
    message = {
        **sample["message"],
        "attributes": {
            "CloudPubSubDeadLetterSourceDeliveryCount": "10",
            "CloudPubSubDeadLetterSourceSubscription": "modelhooks-register-gcr",
        },
    }
    pulled = [{"ackId": base64.b64encode(b"ack-1").decode(), "message": message}]
    (checkout / "terraform" / "gcp" / "dead.json").write_text(json.dumps(pulled, indent=2))
    walk = Walk(checkout, dict(os.environ))
    walk.env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{walk.env['PATH']}"
    walk.env.pop("MODELHOOKS_HOME", None)
    walk.substitutions["<register URL>"] = f"{served.url}/functions/register"
    walk_all("terraform/gcp/README.md", walk)
