"""Cloud Run functions source folders, one per function, as `gcloud functions deploy
--source DIR` and terraform/gcp take them: `main.py` (the function's functions-framework
target), `requirements.txt` (the modelhooks wheel, with every extra that function's code
paths can import, whatever backends it is configured with: `modelhooks.bootstrap.extras_of`,
derived from the dependencies it names) and the wheel itself.

    python -m tests.tools.cloud_run_sources build/functions        (make sources)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from modelhooks.bootstrap import extras_of
from modelhooks.handlers import NAMES, load

ROOT = Path(__file__).resolve().parents[2]

MAIN = '''"""Cloud Run functions entry point of modelhooks' `{name}` function (target `{name}`)."""

from modelhooks.main import {name}  # noqa: F401
'''


PACKAGED = ("pyproject.toml", "README.md", "functions", "events")  # what the wheel is built from
_BUILT = shutil.ignore_patterns("__pycache__", "*.pyc")


def build_wheel(out: Path) -> Path:
    """The modelhooks wheel, built from this checkout into `out`: from a copy of what it
    packages (setuptools builds in the source tree, and its build/lib of an earlier build
    would ship modules deleted since)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "source"
        for name in PACKAGED:
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, source / name, ignore=_BUILT)
            else:
                (source / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / name, source / name)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp, str(source)],
            check=True,
        )
        (built,) = Path(tmp).glob("modelhooks-*.whl")
        return Path(shutil.copy(built, out / built.name))


def requirement(wheel: str, extras: tuple[str, ...]) -> str:
    """The requirements.txt line: the wheel next to it, with these extras."""
    return f"./{wheel}[{','.join(extras)}]" if extras else f"./{wheel}"


def write_sources(wheel: Path, out: Path) -> dict[str, Path]:
    """One source folder per function under `out`, by name."""
    folders = {}
    for name in NAMES:
        folder = out / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        shutil.copy(wheel, folder / wheel.name)
        (folder / "requirements.txt").write_text(
            requirement(wheel.name, extras_of(load(name))) + "\n"
        )
        (folder / "main.py").write_text(MAIN.format(name=name))
        folders[name] = folder
    return folders


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "build/functions")
    with tempfile.TemporaryDirectory() as tmp:
        for name, folder in write_sources(build_wheel(Path(tmp)), out).items():
            print(f"{name}: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
