"""The tqdm progress bar on stderr that `sign`, `verify` and `transfer` show (bytes, binary
units); tqdm is imported when a bar starts. Each command says what it has done so far."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["Bar"]


class Bar:
    def __init__(self, label: str, quiet: bool = False) -> None:
        self._label, self._quiet = label, quiet
        self._bar: Any = None

    def start(self, total: int | None) -> None:
        from tqdm import tqdm

        self._bar = tqdm(
            total=total,
            desc=self._label,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=sys.stderr,
            disable=self._quiet,
        )

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
