"""The install without Knative (infra/kubernetes) on the harness's real node, as the test of
it (tests/e2e/test_functions_as_pods.py) and its benchmark (tests/bench/bench_pods.py) run it.

What is changed for the test node, and why: it runs no kube-proxy and no cluster DNS (the
harness's node, see its docstring), so each Pod runs on the host network with the apiserver's
loopback address (``node.pod_env``) and a port of its own, one replica each (Recreate on a
change: a surge Pod would want the same port), and the
Services' DNS names in the rendered manifests are replaced by those loopback addresses; the
settings ConfigMap selects the Kubernetes registry and allows loopback registries (the
harness's). Nothing else.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from modelhooks.adapters.oci.distribution import DistributionRegistry
from tests.integration.manifests import Kubectl, documents
from tests.servers._proc import free_port
from tests.servers.containers import Podman
from tests.servers.node import Node
from tests.servers.recipes import RECIPES
from tests.servers.registries import OciRegistry
from tests.unit.signing_material import make_key

__all__ = ["HOME", "MODELS", "Installed", "install", "push_model"]

HOME = "modelhooks"
SERVICE_URL = re.compile(r"http://(modelhooks-[a-z-]+)\.modelhooks\.svc\.cluster\.local")
MODELS = "default"  # the Models' namespace (their records go to the shared namespace)


@dataclass
class Installed:
    node: Node
    kubectl: Kubectl
    ports: dict[str, int]  # Deployment → its port on the host network
    api: Any  # an admin ApiClient

    def url(self, deployment: str) -> str:
        return f"http://127.0.0.1:{self.ports[deployment]}"

    def logs(self) -> dict[str, str]:
        """Every Pod's log in the install's namespace, by Pod name."""
        pods = json.loads(self.kubectl("get", "pods", "-n", HOME, "-o", "json"))["items"]
        return {
            p["metadata"]["name"]: self.kubectl(
                "logs", "-n", HOME, p["metadata"]["name"], "--all-containers", check=False
            )
            for p in pods
        }

    def until(self, what: str, check: Callable[[], Any], timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := check():
                return value
            time.sleep(0.3)
        logs = "\n".join(f"--- {pod}\n{text[-2500:]}" for pod, text in self.logs().items())
        raise AssertionError(f"timed out waiting for {what}\n{logs}")


def for_the_node(rendered: str, image: str, node: Node) -> tuple[str, dict[str, int]]:
    """The rendered install as the test node runs it (the module's docstring says what
    changes and why)."""
    docs = documents(rendered)
    ports = {
        d["metadata"]["name"]: free_port()
        for d in docs
        if d["kind"] == "Deployment"
        and any("ports" in c for c in d["spec"]["template"]["spec"]["containers"])
    }
    for doc in docs:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "modelhooks-settings":
            doc["data"].update(
                MODELHOOKS_REGISTRY_BACKEND="kubernetes",
                MODELHOOKS_STORE_ALLOW_LOCAL_TARGETS="true",
            )
        if doc["kind"] != "Deployment":
            continue
        # one node, one host network: one Pod per port, replaced (not surged) on a change
        doc["spec"].update(replicas=1, strategy={"type": "Recreate"})
        pod = doc["spec"]["template"]["spec"]
        pod.update(hostNetwork=True, dnsPolicy="Default")  # no cluster DNS to ask
        port = ports.get(doc["metadata"]["name"])
        for container in pod["containers"]:
            assert container["image"].startswith("registry.example.com/modelhooks:")
            container["image"] = image
            env = {v["name"]: v for v in container.get("env", [])}
            env.update({v["name"]: v for v in node.pod_env})
            if port is not None:
                env["PORT"] = {"name": "PORT", "value": str(port)}
                container["ports"] = [{**container["ports"][0], "containerPort": port}]
                probe = container["readinessProbe"]
                (probe.get("tcpSocket") or probe["httpGet"])["port"] = port
            if "MODELHOOKS_NOTIFY_ROLLOUT" in env:  # as infra/k8s/rbac/notify.yaml says to
                env["MODELHOOKS_NOTIFY_ROLLOUT"] = {
                    "name": "MODELHOOKS_NOTIFY_ROLLOUT",
                    "value": "true",
                }
            container["env"] = list(env.values())
    text = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)
    return SERVICE_URL.sub(lambda m: f"http://127.0.0.1:{ports[m[1]]}", text), ports


@contextmanager
def install(node: Node, image: str, podman: Podman, work: Path) -> Iterator[Installed]:
    """`image` pushed to the node's registry and the install without Knative applied as
    infra/README says (the Secrets and ConfigMaps of its step 3 created), every Deployment
    Available; the install's namespace deleted afterwards."""
    reference = f"{node.registry.host}/modelhooks:{image.rsplit(':', 1)[1]}"
    podman("push", "--tls-verify=false", image, f"docker://{reference}")
    kubectl = Kubectl(node.kube, work / "kubectl")
    text, ports = for_the_node(kubectl("kustomize", "infra/kubernetes"), reference, node)
    first = [d for d in documents(text) if d["kind"] in ("Namespace", "CustomResourceDefinition")]
    kubectl("apply", "-f", "-", stdin="---\n".join(yaml.safe_dump(d) for d in first))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    key = make_key(work, "signing").private
    cert, tls_key = node.kube.ca.issue("modelhooks-admission", work / "tls")
    kubectl("create", "secret", "generic", "modelhooks-signing-key", "-n", HOME,
            f"--from-file=private-key.pem={key}")  # fmt: skip
    kubectl("create", "secret", "generic", "modelhooks-ingress-auth", "-n", HOME,
            "--from-literal=spec=none")  # fmt: skip
    kubectl("create", "secret", "tls", "modelhooks-admission-tls", "-n", HOME,
            f"--cert={cert}", f"--key={tls_key}")  # fmt: skip
    for function in ("prune", "cleanup"):
        kubectl("create", "configmap", f"modelhooks-{function}-policies", "-n", HOME,
                "--from-literal=policies.yaml=policies: []")  # fmt: skip
    # the Models' namespace opted in (infra/README.md, Deploy step 5): watch-models selects it
    kubectl("label", "namespace", MODELS, "modelhooks.dev/models=enabled", "--overwrite")
    # what a team lends notify in its namespace (infra/k8s/rbac/notify.yaml)
    kubectl("create", "rolebinding", "modelhooks-notify-rollout", "-n", MODELS,
            "--clusterrole=modelhooks-notify-rollout", f"--serviceaccount={HOME}:modelhooks-notify")  # fmt: skip
    kubectl("apply", "-f", "-", stdin=text)
    kubectl("wait", "--for=condition=Available", "deployment", "--all", "-n", HOME,
            "--timeout=240s")  # fmt: skip
    try:
        with node.kube.api_client() as api:
            yield Installed(node, kubectl, ports, api)
    finally:
        kubectl("delete", "namespace", HOME, "--wait=false", check=False)
        kubectl("delete", "rolebinding", "modelhooks-notify-rollout", "-n", MODELS, check=False)
        kubectl("label", "namespace", MODELS, "modelhooks.dev/models-", check=False)


def push_model(
    registry: OciRegistry, repository: str, content: str, work: Path, tag: str = "1"
) -> str:
    """A one-file model pushed with oras as `repository:tag`; its manifest digest."""
    (work / "weights.bin").write_text(content)
    pushed = subprocess.run(
        [str(RECIPES["oras"].binary()), "push", "--plain-http",
         f"{registry.host}/{repository}:{tag}", "weights.bin"],
        cwd=work, capture_output=True, text=True,
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    digest = DistributionRegistry(registry.url).resolve(repository, tag)
    assert digest and digest.startswith("sha256:")
    return digest
