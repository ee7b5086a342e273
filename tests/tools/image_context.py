"""Stage the build context of infra/image/Dockerfile: `wheels/` (the modelhooks wheel, and
with --with-dependencies every wheel it needs, for an offline build) and `main.py`.

    python -m tests.tools.image_context build/image                 (make image)
    python -m tests.tools.image_context build/image --with-dependencies
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from tests.tools.cloud_run_sources import ROOT, build_wheel

EXTRAS = "gcp,aws,k8s,signing"  # the Dockerfile's default EXTRAS


def stage(out: Path, *, with_dependencies: bool = False, extras: str = EXTRAS) -> Path:
    """Recreate the context in `out` and return it."""
    shutil.rmtree(out, ignore_errors=True)
    wheels = out / "wheels"
    wheel = build_wheel(wheels)
    shutil.copy(ROOT / "main.py", out / "main.py")
    if with_dependencies:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
        subprocess.run([*pip, "--dest", str(wheels), f"{wheel}[{extras}]"], check=True)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.image_context")
    parser.add_argument("out", type=Path, nargs="?", default=Path("build/image"))
    parser.add_argument("--with-dependencies", action="store_true")
    args = parser.parse_args(argv)
    print(stage(args.out, with_dependencies=args.with_dependencies))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
