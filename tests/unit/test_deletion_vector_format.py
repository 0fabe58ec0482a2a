"""Deletion vectors as the Delta protocol stores them ("Deletion Vector Format"), decoded
without a server: RoaringBitmapArrays, the z85 text of inline and stored descriptors, the
framed file with its checksum, and damage refused with the reason."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from spark_cdc.server_plugin.delta.deletion_vectors import (
    DeletionVector,
    DeletionVectorError,
    row_positions,
    serialized_bitmap,
    z85_decode,
)

from tests.support.delta_dv_tables import bitmap_array, z85
from tests.support.delta_fixtures import fixture_dir


@pytest.mark.parametrize(
    "positions",
    [
        [0, 9],
        list(range(5)),
        [1, 2, 3] + list(range(100_000, 200_000)) + [70_000 + 3 * i for i in range(6_000)],
        [5, 2**33 + 4, 2**33 + 5],  # two buckets of the 64-bit array
        list(range(0, 300_000, 2)),  # bitmap containers
    ],
)
def test_roaring_bitmap_arrays_decode_to_their_positions(positions: list[int]) -> None:
    got = row_positions(bitmap_array(positions), len(positions))
    assert got.dtype == np.uint64
    assert got.tolist() == sorted(positions)


def test_the_delta_spark_fixtures_stored_deletion_vector() -> None:
    stored = DeletionVector("u", "vBn[lx{q8@P<9BNH/isA", 1, 36, 2)
    assert stored.file_path() == "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"
    raw = (fixture_dir("table-with-dv-small") / stored.file_path()).read_bytes()  # type: ignore[operator]
    read = serialized_bitmap(stored, lambda _, at, size: raw[at : at + size])
    assert row_positions(read, 2).tolist() == [0, 9]


def test_z85_round_trip_and_inline_descriptors() -> None:
    data = bytes(range(40))
    assert z85_decode(z85(data)) == data
    # Inline DVs of cdf-table-with-dv, the last with the Rust z85 crate's padded tail.
    for text, size, expected in [
        ("^Bg9^0rr910000000000iXQKl0rr91000935c8Xg000311onP9", 40, [0, 1, 4, 5]),
        ("^Bg9^0rr910000000000iXQKl0rr91000005c8Xg##093", 34, [3]),
    ]:
        inline = DeletionVector("i", text, None, size, len(expected))
        assert row_positions(serialized_bitmap(inline, None), len(expected)).tolist() == expected


def test_damaged_deletion_vectors_are_refused() -> None:
    data = bitmap_array([1, 2])
    framed = b"\x01" + struct.pack(">i", len(data)) + data + b"\0\0\0\0"
    stored = DeletionVector("u", z85(bytes(16)), 1, len(data), 2)
    with pytest.raises(DeletionVectorError, match="checksum"):
        serialized_bitmap(stored, lambda _, at, size: framed[at : at + size])
    with pytest.raises(DeletionVectorError, match="magic number"):
        row_positions(b"\0" * 12 + data[12:])
    with pytest.raises(DeletionVectorError, match="log says 3"):
        row_positions(data, 3)
