"""Models laid in the embedded local store (`$MODELHOOKS_HOME/store/<bucket>/`), as a
user drops them there: a push counts only where its prefix holds a model."""

from __future__ import annotations

from pathlib import Path

__all__ = ["SAMPLE_VERSIONS", "lay_model"]

# The model versions the bundled samples' bucket notifications name (bucket `models`).
SAMPLE_VERSIONS = ("sentiment/0", "sentiment/1", "sentiment v2/1+rc1")


def lay_model(home: Path, bucket: str, prefix: str, content: bytes = b"weights") -> Path:
    """A model version in the local store: one weights file under `bucket/prefix`."""
    where = home / "store" / bucket / prefix
    where.mkdir(parents=True, exist_ok=True)
    (where / "weights.bin").write_bytes(content)
    return where
