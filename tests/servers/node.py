"""A single-node Kubernetes on loopback: Pods really run (facts: ../shared/NODE-LOCAL.md).

etcd + a kube-apiserver of its own (`start_kube(for_node=True)`: Node,RBAC, ServiceAccount
admission, ImageVolume), kube-controller-manager (``default`` ServiceAccounts, tokens,
Deployments), kube-scheduler, containerd v2.2.9 (Debian's runc; image volumes need 2.x) with
a pause image built here (our static `node/pause.go` on scratch, imported as containerd's
pinned sandbox image: nothing can be pulled), a kubelet (cgroupfs, its own cgroup root), a
bridge CNI (a bridge and a 10.244.N.0/24 of its own) and a loopback docker-registry that
containerd pulls from over plain HTTP (``push_image``, ``push_artifact``).

Pods that call the apiserver run with ``hostNetwork: true`` and ``env: node.pod_env``
(KUBERNETES_SERVICE_HOST=127.0.0.1 and the apiserver's port): the apiserver listens on
loopback only and no kube-proxy runs, so the ``kubernetes`` Service's ClusterIP leads
nowhere; kube-proxy would be another build and iptables rules on a machine other sessions
share, for no more than what the host network gives a one-node test cluster.

Everything of a node is its own (ports, work dir, bridge, subnet, cgroup root), so two nodes
can run at once. Stopping kills the kubelet, every process in the node's cgroups, containerd
and its shims, then unmounts what is left under the work dir, deletes the bridge, the
cgroups, the shims' sockets and CNI results (`leftovers` lists what would remain). One file
stays: the kubelet's device-plugin socket, /var/lib/kubelet/device-plugins/kubelet.sock, a
fixed path every kubelet of the machine shares (no device plugins run here).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import signal
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.servers._proc import Process, ServerFailed, free_port
from tests.servers.kube import KUBELET_TOKEN, NODE_NAME, KubeApiServer, start_kube
from tests.servers.recipes import PAUSE_IMAGE, RECIPES
from tests.servers.registries import OciRegistry, start_docker_registry

NEEDS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runc",
    "cni-plugins",
    "pause",
    "node-probe",
    "docker-registry",
)
CGROUP_V1 = Path("/sys/fs/cgroup")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
MODEL_LAYER_TITLE = "model.tar"


@dataclass(frozen=True)
class Node:
    """``kube`` (its apiserver, admin client), ``registry`` (push images, pull by Pods),
    ``pod_env`` (the env a hostNetwork Pod needs to reach the apiserver), ``probe_image``
    (node/probe.go on scratch: ``cat``, ``whoami``, ``sleep``), and what `leftovers` checks."""

    name: str
    kube: KubeApiServer
    registry: OciRegistry
    workdir: Path
    bridge: str
    cgroup_root: str
    probe_image: str
    pids: dict[str, int]
    # the containers containerd had when the node stopped (their shims' sockets are in /run)
    containers: list[str]

    @property
    def pod_env(self) -> list[dict[str, str]]:
        port = self.kube.url.rsplit(":", 1)[1]
        return [
            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": port},
        ]

    def push_image(self, repository: str, files: dict[str, bytes], entrypoint: list[str]) -> str:
        """An image of ``files`` (path -> content, executable) pushed; returns its reference."""
        return push_image(self.registry, repository, files, entrypoint)

    def push_artifact(self, repository: str, files: dict[str, bytes]) -> str:
        """A model an image volume mounts: one tar layer titled ``model.tar``
        (``org.opencontainers.image.title``: what `modelhooks sign oci://…` signs, the layer's
        content address) and a real image config; returns its reference (tag ``latest``)."""
        return push_image(self.registry, repository, files, None, title=MODEL_LAYER_TITLE)


def _layer(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(p) for f in files for p in Path(f).parents if str(p) != "."})
        for folder in dirs:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, content in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o755
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _image(
    files: dict[str, bytes], entrypoint: list[str] | None, title: str | None = None
) -> tuple[bytes, bytes, bytes]:
    """(layer, config, manifest) of a one-layer OCI image; `title` annotates the layer."""
    layer = _layer(files)
    config: dict[str, Any] = {
        "architecture": "amd64",
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
        "config": {"Entrypoint": entrypoint} if entrypoint else {},
    }
    config_bytes = json.dumps(config).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": _descriptor(OCI_CONFIG, config_bytes),
        "layers": [_descriptor(OCI_LAYER, layer)],
    }
    if title:
        manifest["layers"][0]["annotations"] = {"org.opencontainers.image.title": title}
    return layer, config_bytes, json.dumps(manifest).encode()


def _descriptor(media_type: str, blob: bytes) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": f"sha256:{hashlib.sha256(blob).hexdigest()}",
        "size": len(blob),
    }


def push_image(
    registry: OciRegistry,
    repository: str,
    files: dict[str, bytes],
    entrypoint: list[str] | None,
    *,
    title: str | None = None,
) -> str:
    layer, config, manifest = _image(files, entrypoint, title)
    for blob in (layer, config):
        start = urllib.request.Request(
            f"{registry.url}/v2/{repository}/blobs/uploads/", method="POST"
        )
        with urllib.request.urlopen(start, timeout=30) as answer:
            location = answer.headers["Location"]
        if location.startswith("/"):
            location = registry.url + location
        digest = f"sha256:{hashlib.sha256(blob).hexdigest()}"
        separator = "&" if "?" in location else "?"
        put = urllib.request.Request(
            f"{location}{separator}digest={digest}",
            data=blob,
            method="PUT",
            headers={"Content-Type": "application/octet-stream"},
        )
        urllib.request.urlopen(put, timeout=30).close()
    put = urllib.request.Request(
        f"{registry.url}/v2/{repository}/manifests/latest",
        data=manifest,
        method="PUT",
        headers={"Content-Type": OCI_MANIFEST},
    )
    urllib.request.urlopen(put, timeout=30).close()
    return f"{registry.host}/{repository}:latest"


def _pause_archive(path: Path) -> Path:
    """An OCI image layout archive of the pause binary, named as containerd's sandbox image."""
    layer, config, manifest = _image({"pause": RECIPES["pause"].binary().read_bytes()}, ["/pause"])
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                **_descriptor(OCI_MANIFEST, manifest),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": PAUSE_IMAGE,
                    "org.opencontainers.image.ref.name": PAUSE_IMAGE.rsplit(":", 1)[1],
                },
            }
        ],
    }
    with tarfile.open(path, "w") as tar:
        entries = {
            "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
            "index.json": json.dumps(index).encode(),
        }
        for blob in (layer, config, manifest):
            entries[f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}"] = blob
        for name, content in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return path


def _containerd_config(work: Path, registry: OciRegistry, cni_conf: Path) -> Path:
    certs = work / "certs.d" / registry.host
    certs.mkdir(parents=True)
    (certs / "hosts.toml").write_text(
        f'server = "{registry.url}"\n[host."{registry.url}"]\n'
        '  capabilities = ["pull", "resolve", "push"]\n  skip_verify = true\n'
    )
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    images = "plugins.'io.containerd.cri.v1.images'"
    config = f"""version = 3
root = "{work / "root"}"
state = "{work / "state"}"
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = "{work / "containerd.sock"}"
[plugins.'io.containerd.internal.v1.opt']
  path = "{work / "opt"}"
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[{runtime}]
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
[{runtime}.containerd]
  default_runtime_name = "runc"
[{runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{runtime}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{RECIPES["runc"].binary()}"
  Root = "{work / "runc"}"
[{runtime}.cni]
  bin_dirs = ["{RECIPES["cni-plugins"].binary().parent}"]
  conf_dir = "{cni_conf}"
[{images}.pinned_images]
  sandbox = "{PAUSE_IMAGE}"
[{images}.registry]
  config_path = "{work / "certs.d"}"
"""
    path = work / "config.toml"
    path.write_text(config)
    return path


def _free_subnet() -> int:
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    for _ in range(100):
        third = secrets.randbelow(240) + 10
        if f"10.244.{third}." not in routes:
            return third
    raise ServerFailed("node: no free 10.244.N.0/24 subnet")


def _cgroup_dirs(root: str) -> list[Path]:
    """The node's cgroup root in every v1 hierarchy (or the v2 tree)."""
    if (CGROUP_V1 / "cgroup.controllers").exists():
        return [CGROUP_V1 / root]
    return [h / root for h in sorted(CGROUP_V1.iterdir()) if h.is_dir() and not h.is_symlink()]


def _make_cgroups(root: str) -> None:
    for folder in _cgroup_dirs(root):
        folder.mkdir(exist_ok=True)
        if folder.parent.name == "cpuset":  # a v1 cpuset takes no task until it has cpus/mems
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (folder / knob).write_text((folder.parent / knob).read_text())


def cgroup_pids(root: str) -> set[int]:
    found: set[int] = set()
    for folder in _cgroup_dirs(root):
        # os.walk, not rglob: a Pod's cgroup may go while it is read (walk skips it)
        for where, _, files in os.walk(folder):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    found |= {int(p) for p in Path(where, "cgroup.procs").read_text().split()}
    return found


def _mounts_under(path: Path) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(path) or point.startswith(f"{path}/"):
            found.append(point)
    return found


def processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
    return found


def leftovers(node: Node) -> list[str]:
    """What a stopped node would have left behind: mounts, processes, its bridge, cgroups."""
    found = [f"mount {m}" for m in _mounts_under(node.workdir)]
    found += [f"process {p}" for p in processes_naming(str(node.workdir)) if p != os.getpid()]
    found += [f"process {p} in the node's cgroups" for p in cgroup_pids(node.cgroup_root)]
    found += [f"log link {link}" for link in _log_links(node.workdir)]
    socket = node.workdir / "containerd" / "containerd.sock"
    found += [f"file {f}" for f in _runtime_files(node.bridge, socket, node.containers)]
    if Path(f"/sys/class/net/{node.bridge}").exists():
        found.append(f"bridge {node.bridge}")
    found += [f"cgroup {d}" for d in _cgroup_dirs(node.cgroup_root) if d.exists()]
    return found


class _Step:
    """A teardown step in the fixture's process list (stopped in reverse order)."""

    def __init__(self, name: str, log_path: Path, stop: Callable[[], None]) -> None:
        self.name, self.log_path, self._stop = name, log_path, stop

    def stop(self, timeout: float = 15.0) -> None:
        with self.log_path.open("a") as log:
            try:
                self._stop()
            except Exception as exc:
                log.write(f"{self.name}: {exc!r}\n")
                raise


def _kill_all(pids: Callable[[], set[int] | list[int]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (found := pids()) and time.monotonic() < deadline:
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _stop_pods(ctr: list[str], cgroup_root: str, containers: list[str]) -> None:
    """Kill every process in the node's cgroups, noting containerd's containers first."""
    listed = subprocess.run([*ctr, "containers", "ls", "-q"], capture_output=True, text=True)
    containers += listed.stdout.split()
    _kill_all(lambda: cgroup_pids(cgroup_root))


def _runtime_files(bridge: str, socket: Path, containers: list[str]) -> list[Path]:
    """Files containerd's shims and CNI keep in fixed places (/run/containerd/s,
    /var/lib/cni/results), named for this node's containers and network."""
    found = []
    for container in containers:
        digest = hashlib.sha256(f"{socket}/k8s.io/{container}".encode()).hexdigest()
        found.append(Path("/run/containerd/s") / digest)
        found.append(Path(f"/var/lib/cni/results/cni-loopback-{container}-lo"))
        found.append(Path(f"/var/lib/cni/results/{bridge}-{container}-eth0"))
    return [f for f in found if f.exists() or f.is_symlink()]


def _clean(
    workdir: Path, bridge: str, cgroup_root: str, containerd_work: Path, containers: list[str]
) -> None:
    _kill_all(lambda: [p for p in processes_naming(str(containerd_work)) if p != os.getpid()])
    for path in _runtime_files(bridge, containerd_work / "containerd.sock", containers):
        with contextlib.suppress(OSError):
            path.unlink()
    for point in sorted(_mounts_under(workdir), key=lambda m: m.count("/"), reverse=True):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)
    subprocess.run(["ip", "link", "delete", bridge], capture_output=True)
    for top in _cgroup_dirs(cgroup_root):
        if top.is_dir():
            for folder in sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            ):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()
    for link in _log_links(workdir):
        with contextlib.suppress(OSError):
            link.unlink()


def _log_links(workdir: Path) -> list[Path]:
    """The kubelet's links in /var/log/containers (a fixed place) to its Pods' logs."""
    logs = Path("/var/log/containers")
    if not logs.is_dir():
        return []
    return [
        link
        for link in logs.iterdir()
        if link.is_symlink() and os.readlink(link).startswith(f"{workdir}/")
    ]


def _wait(what: str, check: Callable[[], bool], processes: list[Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in processes:
            if isinstance(process, Process) and not process.alive():
                raise ServerFailed(
                    f"node: {process.name} exited while waiting for {what}; log {process.log_path}"
                )
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.2)
    raise ServerFailed(
        f"node: {what} not after {timeout:.0f}s; logs in {processes[-1].log_path.parent}"
    )


def start_node(workdir: Path) -> tuple[Node, list[Any]]:
    from kubernetes import client

    ident = secrets.token_hex(3)
    bridge, cgroup_root = f"mh{ident}", f"modelhooks-node-{ident}"
    containerd_work = workdir / "containerd"
    cni_conf = workdir / "cni" / "net.d"
    cni_conf.mkdir(parents=True)
    processes: list[Any] = []
    teardown = workdir / "teardown.log"
    containers: list[str] = []
    processes.append(
        _Step(
            "node-cleanup",
            teardown,
            lambda: _clean(workdir, bridge, cgroup_root, containerd_work, containers),
        )
    )
    try:
        registry, registry_processes = start_docker_registry(_sub(workdir, "registry"))
        processes += registry_processes
        containerd_work.mkdir()
        config = _containerd_config(containerd_work, registry, cni_conf)
        containerd = Process(
            "containerd",
            [RECIPES["containerd"].binary(), "--config", config],
            log_path=workdir / "containerd.log",
            env={"PATH": f"{_shim_dir(workdir)}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
        )
        processes.append(containerd)
        _write_cni(cni_conf, bridge, workdir)
        kube, kube_processes = start_kube(_sub(workdir, "kube"), for_node=True)
        processes = processes[:1] + kube_processes + processes[1:]
        ctr = [
            str(RECIPES["ctr"].binary()),
            "--address",
            str(containerd_work / "containerd.sock"),
            "-n",
            "k8s.io",
        ]
        containerd.wait_ready(
            lambda: subprocess.run([*ctr, "version"], capture_output=True).returncode == 0,
            timeout=30,
        )
        imported = subprocess.run(
            [*ctr, "images", "import", "--local", str(_pause_archive(workdir / "pause.tar"))],
            capture_output=True,
            text=True,
        )
        if imported.returncode != 0:
            raise ServerFailed(f"node: importing the pause image failed: {imported.stderr}")
        processes.append(
            _Step("node-pods", teardown, lambda: _stop_pods(ctr, cgroup_root, containers))
        )
        admin = kube.write_kubeconfig(workdir / "admin.kubeconfig")
        processes += _control_plane(kube, admin, workdir)
        _make_cgroups(cgroup_root)
        kubelet = _kubelet(kube, workdir, containerd_work, cgroup_root)
        processes.append(kubelet)
        with kube.api_client() as api:
            rbac = client.RbacAuthorizationV1Api(api)
            rbac.create_cluster_role_binding(
                {
                    "metadata": {"name": "modelhooks-apiserver-to-kubelet"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "system:kubelet-api-admin",
                    },
                    "subjects": [
                        {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "User",
                            "name": "kube-apiserver-kubelet-client",
                        }
                    ],
                }
            )
            core = client.CoreV1Api(api)

            def node_ready() -> bool:
                conditions = core.read_node(NODE_NAME).status.conditions or []
                return any(c.type == "Ready" and c.status == "True" for c in conditions)

            _wait("the Node Ready", node_ready, processes, 60)
            _wait(
                "the default ServiceAccount",
                lambda: bool(core.read_namespaced_service_account("default", "default")),
                processes,
                60,
            )
        probe = push_image(
            registry,
            "node-probe",
            {"probe": RECIPES["node-probe"].binary().read_bytes()},
            ["/probe"],
        )
        pids = {p.name: p.pid for p in processes if isinstance(p, Process)}
        node = Node(
            NODE_NAME, kube, registry, workdir, bridge, cgroup_root, probe, pids, containers
        )
        return node, processes
    except BaseException:
        for process in reversed(processes):
            with contextlib.suppress(Exception):
                process.stop()
        raise


def _sub(workdir: Path, name: str) -> Path:
    path = workdir / name
    path.mkdir()
    return path


def _shim_dir(workdir: Path) -> Path:
    """containerd finds its shim as `containerd-shim-runc-v2` on PATH."""
    folder = workdir / "bin"
    folder.mkdir(exist_ok=True)
    link = folder / "containerd-shim-runc-v2"
    if not link.exists():
        link.symlink_to(RECIPES["containerd-shim-runc-v2"].binary())
    return folder


def _write_cni(conf_dir: Path, bridge: str, workdir: Path) -> None:
    subnet = f"10.244.{_free_subnet()}.0/24"
    config = {
        "cniVersion": "1.0.0",
        "name": bridge,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "dataDir": str(workdir / "cni" / "ipam"),
                },
            }
        ],
    }
    (conf_dir / "10-bridge.conflist").write_text(json.dumps(config, indent=2))


def _control_plane(kube: KubeApiServer, kubeconfig: Path, workdir: Path) -> list[Process]:
    assert kube.service_account_key is not None
    manager = Process(
        "kube-controller-manager",
        [
            RECIPES["kube-controller-manager"].binary(),
            f"--kubeconfig={kubeconfig}",
            f"--root-ca-file={kube.ca_file}",
            f"--service-account-private-key-file={kube.service_account_key}",
            "--use-service-account-credentials",
            "--controllers=*,-nodeipam",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={workdir / 'controller-manager-certs'}",
        ],
        log_path=workdir / "kube-controller-manager.log",
    )
    scheduler = Process(
        "kube-scheduler",
        [
            RECIPES["kube-scheduler"].binary(),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={workdir / 'scheduler-certs'}",
        ],
        log_path=workdir / "kube-scheduler.log",
    )
    return [manager, scheduler]


def _kubelet(
    kube: KubeApiServer, workdir: Path, containerd_work: Path, cgroup_root: str
) -> Process:
    root = workdir / "kubelet"
    root.mkdir()
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{cgroup_root}",
        "failSwapOn": False,
        "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{containerd_work / 'containerd.sock'}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(kube.ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "featureGates": {"ImageVolume": True},
        "podLogsDir": str(workdir / "pod-logs"),
        "volumePluginDir": str(workdir / "volume-plugins"),
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
    }
    config_file = workdir / "kubelet.json"
    config_file.write_text(json.dumps(config, indent=2))
    kubeconfig = kube.write_kubeconfig(
        workdir / "kubelet.kubeconfig", token=KUBELET_TOKEN, user="kubelet"
    )
    return Process(
        "kubelet",
        [
            RECIPES["kubelet"].binary(),
            f"--config={config_file}",
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={NODE_NAME}",
            f"--root-dir={root}",
            f"--cert-dir={root / 'pki'}",
            "--v=1",
        ],
        log_path=workdir / "kubelet.log",
        stop_signal=signal.SIGKILL,  # its SIGTERM takes ~14 s; the cleanup stops its Pods
    )
