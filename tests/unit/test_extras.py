"""Optional libraries (modelhooks.core.extras): each missing one is a configuration error
naming the extra to install, found at start-up for the backends the settings select.
The same paths run for real, in a venv without the extras, in tests/e2e/test_packaging.py."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from modelhooks import bootstrap
from modelhooks.adapters.oci.artifact_registry import ArtifactRegistry
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.core import extras
from modelhooks.core.extras import MODULES, MissingExtra, importing
from modelhooks.core.settings import Settings, load_settings
from modelhooks.handlers import NAMES, load

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture
def hide(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Make modules look not installed (an import fails, find_spec finds nothing)."""

    def hidden(*modules: str) -> None:
        for module in modules:
            monkeypatch.setitem(sys.modules, module, None)  # type: ignore[arg-type]
        extras._installed.cache_clear()

    yield hidden
    extras._installed.cache_clear()


def test_the_table_names_every_extra_of_pyproject_and_modules_that_exist() -> None:
    declared = set(PYPROJECT["project"]["optional-dependencies"]) - {"all", "dev"}
    assert set(MODULES) == declared
    for extra in MODULES:
        assert extras.missing(extra) is None, f"{extra}: {extras.missing(extra)} (a typo?)"


def test_a_missing_module_of_the_extra_is_a_config_error_naming_the_install(
    hide: Callable[..., None],
) -> None:
    hide("boto3")
    with pytest.raises(MissingExtra) as caught, importing("aws", "s3:// URIs"):
        import boto3  # noqa: F401
    assert "s3:// URIs needs the aws extra (boto3 is not installed)" in caught.value.message
    assert caught.value.message.endswith("pip install 'modelhooks[aws]'")


def test_a_missing_module_of_another_extra_is_left_as_it_is(hide: Callable[..., None]) -> None:
    hide("kubernetes")
    with pytest.raises(ModuleNotFoundError), importing("aws", "s3:// URIs"):
        import kubernetes  # noqa: F401


def _settings(tmp_path: Path, **env: str) -> Settings:
    return load_settings(env={"MODELHOOKS_HOME": str(tmp_path), **env})


def test_start_up_names_every_extra_the_selected_backends_lack(
    hide: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FUNCTION_TARGET", raising=False)
    hide("boto3", "google.cloud.storage", "kubernetes")
    settings = _settings(
        tmp_path, MODELHOOKS_STORE_BACKEND="cloud", MODELHOOKS_REGISTRY_BACKEND="kubernetes"
    )
    with pytest.raises(MissingExtra) as caught:
        bootstrap.build(settings, sink=None)
    message = caught.value.message
    assert "registry.backend=kubernetes needs the k8s extra" in message
    assert "store.backend=cloud (gs:// on GCS) needs the gcp extra" in message
    assert message.endswith("pip install 'modelhooks[aws,gcp,k8s]'")
    # backends not selected ask for nothing: the embedded defaults start without extras
    bootstrap.build(_settings(tmp_path), sink=None)


def test_start_up_asks_only_for_what_the_hosted_function_uses(
    hide: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide("boto3")
    settings = _settings(tmp_path, MODELHOOKS_STORE_BACKEND="cloud")
    monkeypatch.setenv("FUNCTION_TARGET", "notify")  # as functions-framework sets it
    bootstrap.build(settings, sink=None)
    monkeypatch.setenv("FUNCTION_TARGET", "register")
    with pytest.raises(MissingExtra, match=r"modelhooks\[aws\]"):
        bootstrap.build(settings, sink=None)


def test_a_signing_key_without_the_signing_extra_stops_start_up(
    hide: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FUNCTION_TARGET", raising=False)
    hide("sigstore_models")
    key = tmp_path / "key.pem"
    key.write_text("not read: the extra is checked first")
    with pytest.raises(MissingExtra, match=r"sigstore_models is not installed.*\[signing\]"):
        bootstrap.build(_settings(tmp_path, MODELHOOKS_SIGNING_KEY=str(key)), sink=None)


@pytest.mark.parametrize("name", NAMES)
def test_each_function_s_extras_cover_every_backend_of_its_dependencies(name: str) -> None:
    fn = load(name)
    derived = set(bootstrap.extras_of(fn))
    assert set(fn.extras) <= derived
    expected = {
        "register": {"gcp", "aws", "k8s"},  # GCS/S3 listings, the Kubernetes registry
        "sign": {"gcp", "aws", "k8s", "signing"},
        "prune": {"gcp", "k8s"},  # Artifact Registry's API; OCI pushes only (no store)
        "cleanup": {"gcp", "aws", "k8s"},
        "notify": {"k8s"},
    }
    assert derived == expected.get(name, derived)


def test_an_artifact_registry_host_without_its_client_goes_through_its_docker_path(
    hide: Callable[..., None], caplog: pytest.LogCaptureFixture
) -> None:
    uri = "oci://us-docker.pkg.dev/project/repo/bert:v1"
    registry, _, _ = OciClients().registry_for(uri)
    assert isinstance(registry, ArtifactRegistry)
    hide("google.cloud.artifactregistry_v1")
    registry, _, _ = OciClients().registry_for(uri)
    assert isinstance(registry, DistributionRegistry)
    assert "pip install 'modelhooks[gcp]'" in caplog.text


def test_only_a_process_hosting_sign_needs_the_signing_extra_for_a_key(
    hide: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings shared by every function (one config file, one set of variables): register
    configured with the key starts without the signing extra, and does not sign."""
    key = tmp_path / "key.pem"
    openssl = ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out"]
    subprocess.run([*openssl, str(key)], check=True)
    hide("model_signing")
    settings = _settings(tmp_path, MODELHOOKS_SIGNING_KEY=str(key))
    monkeypatch.setenv("FUNCTION_TARGET", "register")
    bootstrap.build(settings, sink=None)
    monkeypatch.setenv("FUNCTION_TARGET", "sign")
    with pytest.raises(MissingExtra, match=r"\[signing\]"):
        bootstrap.build(settings, sink=None)


def test_make_run_installs_every_extra() -> None:
    """The README's demo signs, verifies with model_signing's CLI, watches Models and names
    gs:// and s3:// URIs: `make run` ($(RUNTIME)) installs modelhooks with all extras."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("$(RUNTIME): pyproject.toml\n", 1)[1].split("\n\n", 1)[0]
    assert re.findall(r"pip install .*-e '\.\[([a-z,]+)\]'", recipe) == ["all"], recipe
    (every,) = PYPROJECT["project"]["optional-dependencies"]["all"]
    assert set(every.removeprefix("modelhooks[").removesuffix("]").split(",")) == set(MODULES)
