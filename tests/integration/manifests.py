"""Kubernetes manifests checked as a cluster would take them: rendered by kubectl's own
kustomize, validated by kubeconform against JSON schemas made here, at test time, from the
CRDs (ours in infra/k8s/crds, Knative's from its Go modules) and from the kube-apiserver's
OpenAPI (the built-in kinds of the same Kubernetes release), then applied with kubectl.

The schemas are strict (an unknown field is an error, as `kubectl apply`'s server-side
field validation makes it): every object schema that lists properties gets
`additionalProperties: false`, as kubeconform's own openapi2jsonschema does, even where the
CRD preserves unknown fields (Knative's do at spec level, and leave refusing them to their
admission webhooks, which do not run here). kubeconform finds a kind's schema at
`<dir>/<group>/<kind>_<version>.json` (`LOCATION`; the core group is named `v1`).
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.servers.kube import KubeApiServer
from tests.servers.recipes import RECIPES

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
# kubeconform's template fields: Group is apiVersion's part before "/" (all of it for "v1")
LOCATION = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
_NUMERIC_STRINGS = {"int-or-string", "quantity"}  # formats of strings YAML may write as numbers


def tool(name: str) -> Path:
    """A cached tool of the harness (kubectl, kubeconform, Knative's CRDs); a missing one
    fails the test naming how to get it, as the server fixtures do."""
    recipe = RECIPES[name]
    if not recipe.installed():
        pytest.fail(
            f"{name} is not installed: run `make servers` "
            f"(python -m tests.servers install {name}) and read its error",
            pytrace=False,
        )
    return recipe.binary()


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def key(doc: Mapping[str, Any]) -> tuple[str, str]:
    return doc["apiVersion"], doc["kind"]


# --- JSON schemas --------------------------------------------------------------------------


def _strict(node: Any) -> Any:
    """An OpenAPI v3 (CRD) or v2 (apiserver) schema as a strict JSON schema."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if k not in ("properties", "nullable")}
    if "properties" in node:  # a map of names to schemas: never read its keys as keywords
        out["properties"] = {name: _strict(s) for name, s in node["properties"].items()}
    if node.get("x-kubernetes-int-or-string") or node.get("format") in _NUMERIC_STRINGS:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}, *out.get("anyOf", [])]
        if node.get("format") == "quantity":
            out["anyOf"][0] = {"type": "number"}
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if (
        "properties" in node
        and node.get("type") == "object"  # not a value validation inside anyOf/allOf
        and "additionalProperties" not in node
    ):
        out["additionalProperties"] = False
    return out


def crd_schemas(crd: Mapping[str, Any]) -> Iterator[tuple[tuple[str, str], dict[str, Any]]]:
    """((apiVersion, kind), schema) for each served version of a CustomResourceDefinition."""
    spec = crd["spec"]
    for version in spec["versions"]:
        if version.get("served", True) and "schema" in version:
            schema = _strict(version["schema"]["openAPIV3Schema"])
            # what every object has, whether the CRD says so or not (the apiserver checks
            # metadata's names and labels itself)
            schema.setdefault("properties", {}).update(
                apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"}
            )
            yield (f"{spec['group']}/{version['name']}", spec["names"]["kind"]), schema


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"].removeprefix("#/definitions/")
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def builtin_schemas(
    openapi_v2: Mapping[str, Any], wanted: set[tuple[str, str]]
) -> Iterator[tuple[tuple[str, str], dict[str, Any]]]:
    """((apiVersion, kind), schema) for the built-in kinds of `wanted` the apiserver's
    OpenAPI v2 document defines, each with the definitions it refers to."""
    definitions = openapi_v2["definitions"]
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            if (api_version, gvk["kind"]) not in wanted:
                continue
            needed, todo = {}, [name]
            while todo:
                ref = todo.pop()
                if ref not in needed:
                    definition = {"type": "object", **definitions[ref]}  # some omit it
                    if "properties" not in definition:
                        definition = definitions[ref]
                    needed[ref] = _strict(definition)
                    todo.extend(_refs(definition))
            yield (
                (api_version, gvk["kind"]),
                {
                    "$ref": f"#/definitions/{name}",
                    "definitions": needed,
                },
            )


def openapi_v2(kube: KubeApiServer) -> dict[str, Any]:
    request = urllib.request.Request(f"{kube.url}/openapi/v2")
    request.add_header("Authorization", f"Bearer {kube.admin_token}")
    request.add_header("Accept", "application/json")
    context = ssl.create_default_context(cafile=str(kube.ca_file))
    with urllib.request.urlopen(request, timeout=60, context=context) as response:
        document: dict[str, Any] = json.load(response)
    return document


def crds(*folders: Path) -> list[dict[str, Any]]:
    found = [d for f in folders for p in sorted(f.glob("*.yaml")) for d in documents(p.read_text())]
    return [d for d in found if d.get("kind") == "CustomResourceDefinition"]


def write_schemas(
    directory: Path, schemas: Iterable[tuple[tuple[str, str], dict[str, Any]]]
) -> str:
    """Write each schema where LOCATION finds it; the -schema-location to give kubeconform."""
    for (api_version, kind), schema in schemas:
        group, _, version = api_version.rpartition("/")
        path = directory / (group or version) / f"{kind.lower()}_{version}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(schema))
    return f"{directory}/{LOCATION}"


def kubeconform(location: str, text: str) -> dict[str, Any]:
    """kubeconform -strict over the YAML `text`: its JSON report (resources, summary)."""
    done = subprocess.run(
        [tool("kubeconform"), "-strict", "-summary", "-output", "json", "-verbose",
         "-schema-location", location, "-"],
        input=text, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(done.stdout)
    report["exit"] = done.returncode
    return report


# --- kubectl --------------------------------------------------------------------------------


class Kubectl:
    """kubectl with a kubeconfig of its own (and its own discovery cache), run from the
    repository root, as the READMEs run it."""

    def __init__(self, kube: KubeApiServer, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "HOME": str(home),
            "KUBECONFIG": str(kube.write_kubeconfig(home / "kubeconfig")),
        }

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        done = subprocess.run(
            [tool("kubectl"), *args], input=stdin, capture_output=True, text=True,
            cwd=ROOT, env=self.env, timeout=180, check=False,
        )  # fmt: skip
        if check and done.returncode:
            pytest.fail(f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
        return done.stdout

    def shell(self, line: str) -> str:
        """A documented command line, verbatim (its first word is `kubectl`)."""
        words = line.split()
        assert words[0] == "kubectl", line
        return self(*words[1:])
