"""Deletion vectors: the rows of a data file that a Delta commit marks deleted.

DML with deletion vectors rewrites no data file: it re-adds the file with a bitmap of
deleted row positions. A change feed needs those bitmaps (which rows a commit newly marked,
which rows a file still holds), so they are read here, on the executors, from the three
places the protocol allows (``u``: a file next to the table named by a z85-encoded UUID,
``p``: an absolute path, ``i``: inline in the log). The bitmap format is Delta's
RoaringBitmapArray: a magic number, then 64-bit row positions as 32-bit Roaring bitmaps in
the portable serialization (``spark_cdc.server_plugin.changefeed.roaring``).
"""

from __future__ import annotations

import struct
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from spark_cdc.server_plugin.changefeed.roaring import (
    BitmapError,
    roaring64_bytes,
    roaring64_positions,
)

MAGIC = 1681511377  # RoaringBitmapArray in the portable format
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = np.full(256, 255, np.uint8)
_Z85_VALUES[np.frombuffer(_Z85.encode(), np.uint8)] = np.arange(85, dtype=np.uint8)
_POWERS = np.array([85**4, 85**3, 85**2, 85, 1], np.uint64)


DeletionVectorError = BitmapError  # a deletion vector that cannot be read


@dataclass(frozen=True)
class DeletionVector:
    """A ``deletionVector`` descriptor of an add or remove action, as in the log."""

    storage_type: str
    path_or_inline: str
    offset: int | None
    size: int
    cardinality: int

    @classmethod
    def from_json(cls, value: dict[str, Any] | None) -> DeletionVector | None:
        if value is None:
            return None
        offset = value.get("offset")
        return cls(
            storage_type=str(value["storageType"]),
            path_or_inline=str(value["pathOrInlineDv"]),
            offset=None if offset is None else int(offset),
            size=int(value["sizeInBytes"]),
            cardinality=int(value["cardinality"]),
        )

    def file_path(self) -> str | None:
        """Where the DV is stored (relative to the table for ``u``), None when inline."""
        if self.storage_type == "i":
            return None
        if self.storage_type == "p":
            return self.path_or_inline
        if self.storage_type == "u":
            encoded = self.path_or_inline
            prefix, code = encoded[:-20], encoded[-20:]
            name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(code))}.bin"
            return f"{prefix}/{name}" if prefix else name
        raise DeletionVectorError(f"unknown storage type '{self.storage_type}'")

    def describe(self) -> str:
        where = self.file_path()
        return "inline" if where is None else f"'{where}' at offset {self.offset or 0}"


@dataclass(frozen=True)
class RowPositions:
    """Deleted row positions already known on the driver (a snapshot's, from delta-rs), as
    the bytes of a little-endian uint64 array."""

    data: bytes

    def describe(self) -> str:
        return "from the snapshot"


def z85_encode(data: bytes) -> str:
    """Z85 text of ``data``, whose length must be a multiple of 4 (a UUID's 16 bytes)."""
    if len(data) % 4:
        raise ValueError(f"z85 encodes whole 4-byte words, not {len(data)} bytes")
    words = np.frombuffer(data, ">u4").astype(np.uint64)
    digits = (words[:, None] // _POWERS) % np.uint64(85)
    return np.frombuffer(_Z85.encode(), np.uint8)[digits.ravel()].tobytes().decode("ascii")


def z85_decode(text: str) -> bytes:
    """Z85 (ZeroMQ's base 85) as bytes; the text's length must be a multiple of 5."""
    codes = np.frombuffer(text.encode("ascii"), np.uint8)
    if len(codes) % 5:
        raise DeletionVectorError(f"z85 text of length {len(codes)} is not a multiple of 5")
    digits = _Z85_VALUES[codes]
    if (digits == 255).any():
        raise DeletionVectorError("z85 text holds a character outside the alphabet")
    words = digits.reshape(-1, 5).astype(np.uint64) @ _POWERS
    if len(words) and words[-1] > 0xFFFFFFFF and text[-5] == "#":
        # The padded tail of the Rust ``z85`` crate (kernel-rs writes it): '#'s, then n+1
        # characters for the last n bytes. Standard Z85 never encodes a value this large.
        tail = text[-5:].lstrip("#")
        value = int(digits[len(digits) - len(tail) :].astype(np.uint64) @ _POWERS[-len(tail) :])
        return words[:-1].astype(">u4").tobytes() + value.to_bytes(len(tail) - 1, "big")
    if (words > 0xFFFFFFFF).any():
        raise DeletionVectorError("z85 text encodes a value above 32 bits")
    return words.astype(">u4").tobytes()


def serialized_bitmap(dv: DeletionVector, read_range: Any) -> bytes:
    """The DV's RoaringBitmapArray bytes; a stored DV's checksum is checked.
    ``read_range(path, offset, length)`` reads bytes of a file (relative to the table
    for ``u``)."""
    if dv.storage_type == "i":
        data = z85_decode(dv.path_or_inline)
        if len(data) < dv.size:
            raise DeletionVectorError(f"inline data holds {len(data)} bytes, not {dv.size}")
        return data[: dv.size]
    path = dv.file_path()
    assert path is not None
    framed = read_range(path, dv.offset or 0, dv.size + 8)
    if len(framed) < dv.size + 8:
        raise DeletionVectorError(f"the file ends before the DV's {dv.size} bytes")
    (size,) = struct.unpack(">i", framed[:4])
    if size != dv.size:
        raise DeletionVectorError(f"it is framed as {size} bytes, the log says {dv.size}")
    data = framed[4 : 4 + size]
    (checksum,) = struct.unpack(">I", framed[4 + size : 8 + size])
    if zlib.crc32(data) != checksum:
        raise DeletionVectorError("its checksum does not match its bytes")
    return data


def row_positions(data: bytes, cardinality: int | None = None) -> np.ndarray:
    """The sorted uint64 row positions of a serialized RoaringBitmapArray."""
    if len(data) < 12:
        raise DeletionVectorError(f"{len(data)} bytes are too few for a bitmap")
    (magic,) = struct.unpack_from("<I", data, 0)
    if magic != MAGIC:
        raise DeletionVectorError(f"magic number {magic} is not {MAGIC}")
    rows = roaring64_positions(data, 4)
    if cardinality is not None and len(rows) != cardinality:
        raise DeletionVectorError(f"it holds {len(rows)} rows, the log says {cardinality}")
    return rows


def bitmap_array(positions: np.ndarray) -> bytes:
    """Sorted, distinct row positions as a serialized RoaringBitmapArray."""
    return struct.pack("<I", MAGIC) + roaring64_bytes(positions)


def deletion_vector_file(bitmaps: list[bytes]) -> tuple[str, bytes, list[int]]:
    """One deletion vector file holding ``bitmaps``, as Delta writes it (a format version
    byte, then each bitmap framed by its size and its CRC-32): its name, its bytes and
    where each bitmap's frame starts (the descriptor's ``offset``)."""
    name = uuid.uuid4()
    parts, offsets, position = [b"\x01"], [], 1
    for data in bitmaps:
        offsets.append(position)
        parts.append(struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data)))
        position += len(data) + 8
    return z85_encode(name.bytes), b"".join(parts), offsets
