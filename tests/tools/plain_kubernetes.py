"""infra/kubernetes/functions.yaml from infra/knative/services.yaml (`make docs`): the same
functions on a cluster without Knative.

Each Knative Service becomes a Deployment (one replica; the same pod spec: image, command,
ServiceAccount, settings, Secrets, projected tokens, probes, limits) and a ClusterIP
Service (port 80 → 8080). What Knative did is done by modelhooks itself:

- the Broker and its Triggers → `modelhooks-broker`, a `modelhooks serve` whose
  `router.subscribers` name every function's Service (it routes by the same Triggers and
  routes their replies on; it runs no function itself), waiting for each as long as the
  longest `timeoutSeconds` of the Knative Services (`router.timeout`: transfer's 3,600 s,
  so a long copy answers for itself, 503 when it stops at MODELHOOKS_TRANSFER_TIMEOUT,
  instead of the broker giving up while it goes on);
- the ApiServerSource → `modelhooks-watch-models`, `modelhooks watch-models --raw` as the
  source's ServiceAccount, POSTing to the broker, with the source's namespaceSelector
  (`--namespace-selector`, from infra/knative/apiserversource.yaml);
- the SinkBinding → K_SINK on the ingress, naming the broker.

The dead-letter sink is not carried over: the broker answers its sender 5xx, and the sender
redelivers (watch-models retries with backoff, then restarts and lists again).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KNATIVE = ROOT / "infra" / "knative" / "services.yaml"
SOURCE = ROOT / "infra" / "knative" / "apiserversource.yaml"
OUTPUT = ROOT / "infra" / "kubernetes" / "functions.yaml"
NAMESPACE = "modelhooks"
PORT = 8080
LABELS = {"app.kubernetes.io/part-of": "modelhooks"}
_KNATIVE_ONLY = ("timeoutSeconds", "containerConcurrency", "responseStartTimeoutSeconds")
_KNATIVE_TIMEOUT = 300  # a Service's timeoutSeconds when it names none (Knative's default)

HEADER = f"""\
# GENERATED from infra/knative/services.yaml by `make docs` (tests/tools/plain_kubernetes.py):
# edit that file, not this one. The functions on a cluster WITHOUT Knative (README.md,
# "Kubernetes without Knative"; `kubectl apply -k infra/kubernetes`):
#
# - each Knative Service is a Deployment + a ClusterIP Service of the same name (port 80 →
#   {PORT}), with the same pod spec: ServiceAccount, settings, Secrets, projected tokens;
# - modelhooks-broker (`modelhooks serve`, router.subscribers) is the Broker: it routes by the
#   Triggers of infra/knative/triggers.yaml, POSTs each event to the function's Service and
#   routes the replies on, as Knative's Broker does; it runs no function itself; it waits
#   for a function as long as the longest timeoutSeconds of the Knative Services
#   (MODELHOOKS_ROUTER_TIMEOUT), which nothing else enforces here;
# - modelhooks-watch-models (`modelhooks watch-models --raw`) is the ApiServerSource, as its
#   ServiceAccount, watching the Models of the namespaces its namespaceSelector matches
#   (--namespace-selector); the ingress's K_SINK (the SinkBinding) is the broker.
#
# Not carried over: the dead-letter sink (the broker answers its sender 5xx and the sender
# redelivers: watch-models retries, then restarts and lists again) and scale to zero.
"""


def _url(name: str) -> str:
    return f"http://{name}.{NAMESPACE}.svc.cluster.local"


def _deployment(name: str, labels: dict[str, str], pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {**LABELS, **labels}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _service(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {**LABELS, **labels}},
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }


def _pod(knative: dict[str, Any], sink: str | None) -> dict[str, Any]:
    spec = copy.deepcopy(knative["spec"]["template"]["spec"])
    for field in _KNATIVE_ONLY:
        spec.pop(field, None)
    for container in spec["containers"]:
        container["ports"] = [{"name": "http", "containerPort": PORT}]
        if sink is not None:
            container.setdefault("env", []).append({"name": "K_SINK", "value": sink})
    return spec


def namespace_selector(source_text: str) -> str:
    """The ApiServerSource's namespaceSelector as a label selector (matchLabels only)."""
    (source,) = [d for d in yaml.safe_load_all(source_text) if d]
    labels = source["spec"]["namespaceSelector"]["matchLabels"]
    return ",".join(f"{key}={value}" for key, value in labels.items())


def _own_pod(template: dict[str, Any], account: str, command: list[str], env: list[Any]) -> Any:
    """A pod like `template`'s (image, settings, limits, security), running `command`."""
    pod = copy.deepcopy(template)
    container = pod["containers"][0]
    pod["serviceAccountName"] = account
    container.update(name=command[1], command=command[:2])
    container.pop("args", None)
    container.pop("env", None)
    if command[2:]:
        container["args"] = command[2:]
    if env:
        container["env"] = env
    container.pop("readinessProbe", None)
    container.pop("ports", None)
    return pod


class _Plain(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # every object spelt out: no &anchors for shared label maps


def generate(knative_text: str) -> str:
    docs = [d for d in yaml.safe_load_all(knative_text) if d]
    out: list[dict[str, Any]] = []
    functions: list[str] = []
    sinks = {d["spec"]["subject"]["name"] for d in docs if d["kind"] == "SinkBinding"}
    broker = "modelhooks-broker"
    template: dict[str, Any] = {}
    timeouts: list[int] = []
    for doc in docs:
        if doc["apiVersion"] == "v1":
            out.append(doc)  # the settings ConfigMap, as it is
            continue
        if doc["kind"] != "Service" or doc["metadata"]["name"] == "modelhooks-dead-letter":
            continue
        name = doc["metadata"]["name"]
        labels = dict(doc["spec"]["template"]["metadata"]["labels"])
        pod = _pod(doc, _url(broker) + "/" if name in sinks else None)
        out += [_deployment(name, labels, pod), _service(name, labels)]
        if "modelhooks.dev/function" in labels:
            functions.append(labels["modelhooks.dev/function"])
            spec = doc["spec"]["template"]["spec"]
            timeouts.append(int(spec.get("timeoutSeconds", _KNATIVE_TIMEOUT)))
            template = template or pod
    subscribers = ";".join(f"{fn}={_url(f'modelhooks-{fn}')}/" for fn in functions)
    broker_labels = {"modelhooks.dev/component": "broker"}
    broker_pod = _own_pod(
        template,
        broker,
        ["modelhooks", "serve"],
        [
            {"name": "MODELHOOKS_SERVE_HOST", "value": "0.0.0.0"},
            {"name": "MODELHOOKS_SERVE_WATCH_INTERVAL", "value": "0"},
            {"name": "MODELHOOKS_INGRESS_AUTH", "value": "none"},
            {"name": "MODELHOOKS_ROUTER_SUBSCRIBERS", "value": subscribers},
            {"name": "MODELHOOKS_ROUTER_TIMEOUT", "value": str(max(timeouts))},
        ],
    )
    broker_pod["containers"][0]["ports"] = [{"name": "http", "containerPort": PORT}]
    broker_pod["containers"][0]["readinessProbe"] = {
        "httpGet": {"path": "/healthz", "port": PORT},
        "periodSeconds": 1,
    }
    watch_labels = {"modelhooks.dev/component": "watch-models"}
    watch = ["modelhooks", "watch-models", "--raw", "--to", _url(broker) + "/"]
    watch += ["--namespace-selector", namespace_selector(SOURCE.read_text())]
    watch_pod = _own_pod(template, "modelhooks-apiserversource", watch, [])
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": broker, "namespace": NAMESPACE, "labels": LABELS},
        # the broker calls the functions, never the apiserver
        "automountServiceAccountToken": False,
    }
    out += [
        account,
        _deployment(broker, broker_labels, broker_pod),
        _service(broker, broker_labels),
        _deployment("modelhooks-watch-models", watch_labels, watch_pod),
    ]
    body = "---\n".join(yaml.dump(d, Dumper=_Plain, sort_keys=False, width=100) for d in out)
    return HEADER + body


def main() -> None:
    text = generate(KNATIVE.read_text())
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if OUTPUT.read_text() == text else 1)
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
