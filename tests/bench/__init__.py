"""Benchmarks (`make bench`): each prints its figures next to its anchor, measured side by
side in one run, and returns its goals; `make bench` ends with every goal, MET or MISSED,
next to its anchor and the machine's load average over the bench that measured it (other
work on the same cores moves every figure), and exits 1 when one is missed."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["Goal", "load"]


def load() -> float:
    """The machine's 1-minute load average (os.getloadavg)."""
    return os.getloadavg()[0]


@dataclass(frozen=True)
class Goal:
    name: str
    measured: str  # the figure, as printed
    target: str  # e.g. ">= 0.8x echo"
    met: bool
    anchor: str = ""  # the figure it is measured against in the same run, e.g. "ff echo 1,992/s"
    load: tuple[float, float] | None = None  # load average at the start and end of its bench

    def line(self) -> str:
        anchor = f"   vs {self.anchor}" if self.anchor else ""
        loaded = f"   load {self.load[0]:.2f} → {self.load[1]:.2f}" if self.load else ""
        return (
            f"  {'MET   ' if self.met else 'MISSED'}  {self.name:40} {self.measured:>14}"
            f"   goal {self.target}{anchor}{loaded}"
        )
