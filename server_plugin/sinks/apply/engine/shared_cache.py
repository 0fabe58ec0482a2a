"""What the server's Python processes on one machine share of the files they read: a value
(a state file's row group, its key index) made once, written as Arrow IPC into a folder of
Spark's local directory and memory-mapped by every process that needs it.

Why: Spark gives a task whichever idle Python worker it finds, so a stream's bucket of the
state lands in another process from one micro-batch to the next. A cache of each process's
own made every worker read and decode every bucket once (measured: 1.45 s a task for a
bucket of 5M type 2 changes, the whole of a 10k-change micro-batch's tasks), and keep a
copy of it: N workers, N copies. Mapped files are read without decoding, by any worker,
from one copy in the page cache.

The folder is ``spark-cdc-shared`` in the first of Spark's local directories that Spark
gives its Python workers (``SPARK_LOCAL_DIRS``: the application's block manager folder,
deleted when the server stops), so nothing outlives the server and a file made by an older
release is never read. Without it (code run outside Spark) values are kept per process
(``key_index.BudgetCache``). Files are written whole and renamed into place, so a reader
never sees half of one; the least recently used go past the budget, never one this process
used in its current round (a batch), and a file deleted while another process maps it
stays readable to it (POSIX).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import pyarrow as pa

T = TypeVar("T")

FOLDER = "spark-cdc-shared"
_SUFFIX = ".arrow"
_FOOTER = struct.Struct("<Q")  # the footer's length, after it: the file's last 8 bytes
# Bumped when what a value's tables hold changes: a file of another layout is not read.
_LAYOUT = 1


@dataclass(frozen=True)
class Codec(Generic[T]):
    """How a value is kept as tables, and made again from them (mapped: no copy)."""

    encode: Callable[[T], tuple[pa.Table, ...]]
    decode: Callable[[tuple[pa.Table, ...]], T]


TABLE: Codec[pa.Table] = Codec(lambda table: (table,), lambda tables: tables[0])


def spark_local_folder() -> str | None:
    """The first of Spark's local directories given to this Python worker (None: not run
    by Spark)."""
    found = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return found if found and os.path.isdir(found) else None


class SharedFiles(Generic[T]):
    """Values kept as files of the folder ``FOLDER/name`` in ``root()`` (None: not
    shared), up to ``budget`` bytes of files in it."""

    def __init__(
        self,
        name: str,
        budget: int,
        codec: Codec[T],
        root: Callable[[], str | None] = spark_local_folder,
    ) -> None:
        self.name, self.budget, self.codec, self.root = name, budget, codec, root
        self._round_started = 0.0

    def __getstate__(self) -> dict[str, object]:
        return {"name": self.name, "budget": self.budget, "codec": self.codec, "root": self.root}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._round_started = 0.0

    def folder(self) -> str | None:
        """Where the values are kept (made private to this user), None: not shared."""
        root = self.root()
        if root is None:
            return None
        folder = os.path.join(root, FOLDER, self.name)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError:
            return None
        return folder

    def next_round(self) -> None:
        # A second early: a file's time is the kernel's coarse clock, a little behind.
        self._round_started = time.time() - 1

    @staticmethod
    def path(folder: str, key: Hashable) -> str:
        """The file of ``key``'s value."""
        digest = hashlib.sha256(repr((_LAYOUT, key)).encode()).hexdigest()
        return os.path.join(folder, digest + _SUFFIX)

    def get(self, folder: str, key: Hashable, make: Callable[[], T]) -> T:
        """The value of ``key``: mapped from its file, else made (and its file written)."""
        path = self.path(folder, key)
        try:
            tables = _mapped(path)
        except FileNotFoundError:
            pass
        except (pa.ArrowException, ValueError, IndexError, struct.error):  # not whole
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        else:
            with contextlib.suppress(OSError):
                os.utime(path)  # recently used: the last to go
            return self.codec.decode(tables)
        made = make()
        try:
            _write(folder, path, self.codec.encode(made))
            self._evict(folder, path)
        except OSError:  # a full disk: the value is made, not shared
            with contextlib.suppress(OSError):
                os.unlink(path)
        return made

    def _evict(self, folder: str, written: str) -> None:
        """The least recently used files gone until the folder is within the budget, none
        this process used in its current round: failing that, the one just written."""
        entries = []
        for entry in os.scandir(folder):
            if entry.name.endswith(_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    found = entry.stat()
                    entries.append((found.st_mtime, found.st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        for used, size, path in sorted(entries):
            if total <= self.budget:
                return
            if used >= self._round_started or path == written:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            total -= size
        if total > self.budget:
            os.unlink(written)


def _write(folder: str, path: str, tables: tuple[pa.Table, ...]) -> None:
    """``tables`` as one file: each an Arrow IPC stream (uncompressed: mapped as it is),
    then a footer giving where each starts and ends. Written under another name and
    renamed: a reader finds the whole file or none."""
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".making-")
    try:
        with os.fdopen(handle, "wb") as out:
            spans = []
            for table in tables:
                start = out.tell()
                with pa.ipc.new_stream(out, table.schema) as stream:
                    stream.write_table(table)
                spans.append((start, out.tell() - start))
            footer = json.dumps(spans).encode()
            out.write(footer)
            out.write(_FOOTER.pack(len(footer)))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _mapped(path: str) -> tuple[pa.Table, ...]:
    """The tables of a file ``_write`` wrote, memory-mapped (no copy of their data)."""
    with pa.memory_map(path) as source:
        data = source.read_buffer()
    (size,) = _FOOTER.unpack(data.slice(data.size - _FOOTER.size).to_pybytes())
    spans = json.loads(data.slice(data.size - _FOOTER.size - size, size).to_pybytes())
    return tuple(pa.ipc.open_stream(data.slice(start, size)).read_all() for start, size in spans)
