"""What a batch's tasks wrote into the tables before the commit that names it: the target's
new files and the state's, as the format describes a file (a Delta add action, a pyiceberg
data file). The commit adds them with the batch's marker; a batch refused, failed or found
applied already has them deleted by its format (``TableFormat.discard``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Staged:
    """What a task wrote for the driver to commit: the target's new files (``rows`` rows,
    the count the batch reports; ``keys``: their first keys, which an Iceberg snapshot
    declares it changes) and the state's."""

    target: tuple[Any, ...] = ()
    state: tuple[Any, ...] = ()
    rows: int = 0
    keys: pa.Array | None = None

    @classmethod
    def joined(cls, parts: list[Staged]) -> Staged:
        """Every task's ``parts`` as one batch's."""
        keys = [k for p in parts if (k := p.keys) is not None and len(k)]
        return cls(
            tuple(f for p in parts for f in p.target),
            tuple(f for p in parts for f in p.state),
            sum(p.rows for p in parts),
            pa.concat_arrays([k.cast(keys[0].type) for k in keys]) if keys else None,
        )


NOTHING = Staged()
