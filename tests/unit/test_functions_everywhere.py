"""Adding a function is its module, its Trigger and Service, its RBAC and Terraform entry
(CONTRIBUTING.md). Everything else derives from the module; this names any place where a
function is missing, or a place that names a function that does not exist."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelhooks import main as targets
from modelhooks.core.function import Function
from modelhooks.delivery.router import FUNCTION_LABEL, load_triggers
from modelhooks.handlers import NAMES, load

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def test_the_catalog_is_the_handler_modules() -> None:
    modules = {p.stem for p in (ROOT / "functions" / "handlers").glob("*.py")} - {"__init__"}
    assert set(NAMES) == modules
    assert NAMES, "no functions"


@pytest.mark.parametrize("name", NAMES)
def test_each_function_module_exports_its_function(name: str) -> None:
    fn = load(name)
    assert isinstance(fn, Function) and fn.name == name
    # an event function accepts events; a webhook function (admission) answers its own requests
    assert bool(fn.accepts) == (fn.kind == "events")
    optional = set(PYPROJECT["project"]["optional-dependencies"])
    assert set(fn.extras) <= optional, f"{name}: unknown extras {set(fn.extras) - optional}"
    assert "event" not in fn.needs  # the event is positional; dependencies are named


@pytest.mark.parametrize("name", NAMES)
def test_each_function_is_in_every_derived_and_declared_place(name: str) -> None:
    assert callable(getattr(targets, name, None)), f"modelhooks.main has no target {name!r}"
    assert name in targets.__all__
    if load(name).kind == "events":
        assert name in {t.function for t in load_triggers(ROOT / "infra" / "knative")}, (
            f"infra/knative/triggers.yaml has no Trigger labelled {FUNCTION_LABEL}: {name}"
        )
        services = {
            d["metadata"]["name"]
            for d in _docs(ROOT / "infra" / "knative" / "services.yaml")
            if d.get("kind") == "Service"
        }
        assert f"modelhooks-{name}" in services, (
            f"infra/knative/services.yaml: no modelhooks-{name}"
        )
    else:  # a webhook: its Deployment, Service and webhook configurations in infra/k8s/<name>/
        docs = [d for path in (ROOT / "infra" / "k8s" / name).glob("*.yaml") for d in _docs(path)]
        kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
        assert ("Deployment", f"modelhooks-{name}") in kinds, f"infra/k8s/{name}: no Deployment"
        assert ("Service", f"modelhooks-{name}") in kinds, f"infra/k8s/{name}: no Service"
    assert (ROOT / "infra" / "k8s" / "rbac" / f"{name}.yaml").is_file()
    variables = (ROOT / "terraform" / "gcp" / "variables.tf").read_text()
    assert f"    {name} = {{" in variables, f"terraform/gcp: var.functions has no {name!r}"
    assert load(name).extras is not None


def test_no_place_names_a_function_that_does_not_exist() -> None:
    triggered = {t.function for t in load_triggers(ROOT / "infra" / "knative")}
    assert triggered <= set(NAMES), triggered - set(NAMES)


def test_the_packaged_triggers_are_the_infra_triggers() -> None:
    packaged = ROOT / "functions" / "triggers.yaml"
    assert packaged.is_symlink()
    assert packaged.resolve() == (ROOT / "infra" / "knative" / "triggers.yaml").resolve()


def test_every_package_folder_is_in_the_distribution() -> None:
    """pyproject.toml lists the packages (folders map into the namespace by name)."""
    config = PYPROJECT["tool"]["setuptools"]
    folders = {name: ROOT / path for name, path in config["package-dir"].items()}
    found = set()
    for package, source in folders.items():
        for init in source.rglob("__init__.py"):
            rel = init.parent.relative_to(source)
            found.add(".".join([package, *rel.parts]))
    assert set(config["packages"]) == found, set(config["packages"]) ^ found
