"""Portable Roaring bitmaps (64-bit, as Delta's deletion vectors and Iceberg's v3 ones
store row positions), decoded with numpy, one container (up to 65,536 values) at a time, so
the cost grows with the containers, never with Python work per value.
"""

from __future__ import annotations

import itertools
import struct

import numpy as np

_COOKIE_NO_RUNS = 12346
_COOKIE_RUNS = 12347
_NO_OFFSET_THRESHOLD = 4


class BitmapError(ValueError):
    """A bitmap that cannot be read; the caller names the file and version."""


def roaring64_positions(data: bytes, start: int) -> np.ndarray:
    """The sorted uint64 values of a portable 64-bit Roaring bitmap at ``start`` (a bucket
    count, then each bucket's high 32 bits and its 32-bit bitmap): Delta's deletion vectors
    after their magic number, Iceberg's (v3) inside their blob."""
    if len(data) < start + 8:
        raise BitmapError(f"{len(data)} bytes are too few for a bitmap")
    (buckets,) = struct.unpack_from("<q", data, start)
    position, parts = start + 8, []
    for _ in range(buckets):
        (high,) = struct.unpack_from("<I", data, position)
        values, position = _roaring32(data, position + 4)
        parts.append(values.astype(np.uint64) | np.uint64(high << 32))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def _roaring32(data: bytes, start: int) -> tuple[np.ndarray, int]:
    """A 32-bit Roaring bitmap in the portable format at ``start``: its values and where
    it ends."""
    try:
        (cookie,) = struct.unpack_from("<I", data, start)
        position = start + 4
        if cookie & 0xFFFF == _COOKIE_RUNS:
            count = (cookie >> 16) + 1
            run_flags = np.unpackbits(
                np.frombuffer(data, np.uint8, (count + 7) // 8, position), bitorder="little"
            )[:count]
            position += (count + 7) // 8
            has_offsets = count >= _NO_OFFSET_THRESHOLD
        elif cookie == _COOKIE_NO_RUNS:
            (count,) = struct.unpack_from("<I", data, position)
            position += 4
            run_flags = np.zeros(count, np.uint8)
            has_offsets = True
        else:
            raise BitmapError(f"unknown Roaring cookie {cookie}")
        header = np.frombuffer(data, "<u2", 2 * count, position).reshape(count, 2)
        position += 4 * count
        if has_offsets:
            position += 4 * count  # offsets: containers are read in order anyway
        parts = []
        for index in range(count):
            key, cardinality = int(header[index, 0]) << 16, int(header[index, 1]) + 1
            if run_flags[index]:
                (runs,) = struct.unpack_from("<H", data, position)
                pairs = np.frombuffer(data, "<u2", 2 * runs, position + 2).reshape(runs, 2)
                position += 2 + 4 * runs
                lengths = pairs[:, 1].astype(np.int64) + 1
                shifts = pairs[:, 0].astype(np.int64) - (np.cumsum(lengths) - lengths)
                values = np.arange(int(lengths.sum())) + np.repeat(shifts, lengths)
            elif cardinality <= 4096:
                values = np.frombuffer(data, "<u2", cardinality, position).astype(np.int64)
                position += 2 * cardinality
            else:
                bits = np.frombuffer(data, np.uint8, 8192, position)
                values = np.flatnonzero(np.unpackbits(bits, bitorder="little"))
                position += 8192
            parts.append(values.astype(np.uint32) | np.uint32(key))
    except (struct.error, ValueError) as error:
        if isinstance(error, BitmapError):
            raise
        raise BitmapError(f"the bitmap is truncated or malformed ({error})") from error
    values = np.concatenate(parts) if parts else np.zeros(0, np.uint32)
    return values, position


def roaring64_bytes(values: np.ndarray) -> bytes:
    """``values`` (sorted, distinct uint64) as a portable 64-bit Roaring bitmap: the
    inverse of ``roaring64_positions``. Written without run containers (every reader
    takes array and bitmap containers; runs are only a size optimisation)."""
    values = np.asarray(values, np.uint64)
    highs = (values >> np.uint64(32)).astype(np.uint32)
    groups = _groups(highs)
    out = [struct.pack("<q", len(groups))]
    for start, end in groups:
        out.append(struct.pack("<I", int(highs[start])))
        out.append(_roaring32_bytes((values[start:end] & np.uint64(0xFFFFFFFF)).astype(np.uint32)))
    return b"".join(out)


def _roaring32_bytes(values: np.ndarray) -> bytes:
    """Sorted, distinct uint32 ``values`` as a portable 32-bit Roaring bitmap (cookie
    without runs, container count, header of keys and cardinalities, offsets, containers:
    an array of uint16 up to 4,096 values, else a 65,536-bit bitmap)."""
    keys = (values >> np.uint32(16)).astype(np.uint16)
    lows = (values & np.uint32(0xFFFF)).astype("<u2")
    groups = _groups(keys)
    count = len(groups)
    containers = []
    for start, end in groups:
        if end - start <= 4096:
            containers.append(lows[start:end].tobytes())
        else:
            bits = np.zeros(1 << 16, bool)
            bits[lows[start:end]] = True
            containers.append(np.packbits(bits, bitorder="little").tobytes())
    header = np.empty((count, 2), "<u2")
    header[:, 0] = [keys[start] for start, _ in groups]
    header[:, 1] = [end - start - 1 for start, end in groups]
    sizes = np.array([len(c) for c in containers], np.int64)
    first = 8 + 8 * count
    offsets = (first + np.concatenate([[0], np.cumsum(sizes)[:-1]])).astype("<u4")
    head = struct.pack("<II", _COOKIE_NO_RUNS, count) + header.tobytes() + offsets.tobytes()
    return head + b"".join(containers)


def _groups(sorted_keys: np.ndarray) -> list[tuple[int, int]]:
    """The (start, end) of each run of equal values in ``sorted_keys``."""
    if not len(sorted_keys):
        return []
    edges = [0, *(np.flatnonzero(np.diff(sorted_keys)) + 1).tolist(), len(sorted_keys)]
    return list(itertools.pairwise(edges))
