"""Which logged transactions a stream's first copy already saw: the copy's database
snapshot (its xmin, xmax and running xids, ``pg_snapshot``'s text) travels in the stream's
offsets, and a transaction it saw is not served again from the log."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Visibility:
    """A database snapshot's visibility (``pg_snapshot``'s text ``xmin:xmax:xip,...``):
    which transactions the first copy saw."""

    xmin: int
    xmax: int
    running: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> Visibility:
        xmin, xmax, running = text.split(":")
        return cls(int(xmin), int(xmax), tuple(int(x) for x in running.split(",") if x))

    def __str__(self) -> str:
        return f"{self.xmin}:{self.xmax}:{','.join(map(str, self.running))}"

    def saw(self, xids: np.ndarray) -> np.ndarray:
        """Whether the snapshot saw each transaction (32-bit xids, as the log has them)."""
        # A 32-bit xid is the 64-bit one nearest xmax with those low bits (PostgreSQL's
        # own comparison: within 2^31 either way).
        ahead = (xids.astype(np.int64) - (self.xmax & 0xFFFFFFFF)) & 0xFFFFFFFF
        full = self.xmax + np.where(ahead >= 1 << 31, ahead - (1 << 32), ahead)
        return (full < self.xmin) | ((full < self.xmax) & ~np.isin(full, self.running))


def seen_by_copy(copied: str | None, xids: np.ndarray) -> np.ndarray:
    """Which transactions the first copy saw (none without a copy)."""
    return Visibility.parse(copied).saw(xids) if copied else np.zeros(len(xids), bool)
