"""A model in a local directory, seen through the ObjectStore port.

Like model_signing, symbolic links are refused unless allowed (then their targets are
hashed): a link can silently point a signed model at content outside it.
"""

from __future__ import annotations

import os
from pathlib import Path

from modelhooks.adapters.object_store.local import LocalObjectStore
from modelhooks.core.errors import BadRequest

__all__ = ["local_model"]


def _symlinks(root: Path) -> list[str]:
    links = []
    for dirpath, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            if os.path.islink(os.path.join(dirpath, name)):
                links.append(Path(dirpath, name).relative_to(root).as_posix())
    return sorted(links)


def local_model(path: Path, *, allow_symlinks: bool = False) -> tuple[LocalObjectStore, str, str]:
    """(store, bucket, prefix) for the model directory at `path`.

    BadRequest when `path` is not a directory, or holds symlinks and they are not allowed.
    """
    root = Path(path).absolute()
    if not root.is_dir():
        raise BadRequest(f"{path} is not a directory")
    if not allow_symlinks and (links := _symlinks(root)):
        raise BadRequest(
            f"{path} contains symbolic links (allow them explicitly to follow them)",
            symlinks=links,
        )
    return LocalObjectStore(root.parent, allow_symlinks=allow_symlinks), root.name, ""
