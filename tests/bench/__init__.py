"""Benchmarks (`make bench`): each prints its figures next to its anchor, measured side by
side in one run, and returns its goals; `make bench` ends with every goal, met or MISSED,
and exits 1 when one is missed."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Goal"]


@dataclass(frozen=True)
class Goal:
    name: str
    measured: str  # the figure, as printed
    target: str  # e.g. ">= 0.8x echo"
    met: bool

    def line(self) -> str:
        return f"  {'met   ' if self.met else 'MISSED'}  {self.name:40} {self.measured:>14}   goal {self.target}"
