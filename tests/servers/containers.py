"""Containers on this machine: Debian's podman with runc (crun refuses the hybrid cgroups
here and setrlimit is not permitted), host networking, and a base image made with
mmdebstrap, since no registry base image can be pulled. See ../shared/TESTING.md.

The base root filesystem is cached like the server binaries
(`<cache>/images/base-bookworm.tar`) and imported once as `localhost/modelhooks-base`.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.servers._cache import build_lock, cache_root, log, run

BASE_IMAGE = "localhost/modelhooks-base"
# minbase plus what the image's Dockerfile needs from its base: python3 with venv, CAs.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")


@dataclass(frozen=True)
class Podman:
    """`podman --runtime runc …` with this machine's containers.conf."""

    conf: Path

    @classmethod
    def configured(cls) -> Podman:
        conf = cache_root() / "containers.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(
            '[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\n'
        )
        return cls(conf)

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", "--runtime", "runc", *args],
            env={"CONTAINERS_CONF": str(self.conf), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            capture_output=True,
            text=True,
            check=check,
        )

    def base_image(self) -> str:
        """The mmdebstrap base (bookworm, minbase + BASE_PACKAGES), imported once."""
        if self("image", "exists", BASE_IMAGE, check=False).returncode == 0:
            return BASE_IMAGE
        tar = cache_root() / "images" / "base-bookworm.tar"
        with build_lock():
            if not tar.is_file():
                tar.parent.mkdir(parents=True, exist_ok=True)
                tmp = tar.with_name("partial-" + tar.name)  # mmdebstrap: format by suffix
                log(f"container base: mmdebstrap bookworm ({', '.join(BASE_PACKAGES)})")
                include = f"--include={','.join(BASE_PACKAGES)}"
                run(
                    "container-base",
                    ["mmdebstrap", "--variant=minbase", include, "bookworm", str(tmp)],
                )
                tmp.replace(tar)
            if self("image", "exists", BASE_IMAGE, check=False).returncode != 0:
                self("import", str(tar), BASE_IMAGE)
        return BASE_IMAGE
