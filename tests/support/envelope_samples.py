"""Flink's sample envelopes (``tests/data/envelopes``, see its SOURCES.md): where they are,
the products table's columns, and the values its history holds."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import types as T

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "envelopes"
SCHEMA = T.StructType(
    [
        T.StructField("id", T.IntegerType()),
        T.StructField("name", T.StringType()),
        T.StructField("description", T.StringType()),
        T.StructField("weight", T.DoubleType()),
    ]
)
# The products table's values in the samples' history.
P = {
    101: ("scooter", "Small 2-wheel scooter", 3.14),
    102: ("car battery", "12V car battery", 8.1),
    103: ("12-pack drill bits", "12-pack of drill bits with sizes ranging from #40 to #3", 0.8),
    104: ("hammer", "12oz carpenter's hammer", 0.75),
    105: ("hammer", "14oz carpenter's hammer", 0.875),
    106: ("hammer", "16oz carpenter's hammer", 1.0),
    107: ("rocks", "box of assorted rocks", 5.3),
    108: ("jacket", "water resistent black wind breaker", 0.1),
    109: ("spare tire", "24 inch spare tire", 22.2),
    110: ("jacket", "water resistent white wind breaker", 0.2),
    111: ("scooter", "Big 2-wheel scooter ", 5.18),
}
LATER = {
    106: ("hammer", "18oz carpenter hammer", 1.0),
    107: ("rocks", "box of assorted rocks", 5.1),
    110: ("jacket", "new water resistent white wind breaker", 0.5),
    111: ("scooter", "Big 2-wheel scooter ", 5.17),
    101: ("scooter", "Small 2-wheel scooter", 5.17),
    102: ("car battery", "12V car battery", 5.17),
}
