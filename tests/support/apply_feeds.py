"""The model tests' inputs for the engine's own tests (no Spark): random feeds of a few
keys (late changes, deletes, truncates, duplicates, NULL updates), cut into random batches,
and the target the model (``apply_model``) makes of a whole feed, for any target format."""

from __future__ import annotations

import itertools
import os
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from spark_cdc.server_plugin.sinks.apply.engine.spec import END_AT, START_AT, ApplySpec

from tests.support.apply_model import Change, scd1, scd2
from tests.support.apply_targets import sorted_rows

# The model tests' examples: 60 in the whole suite (what CI runs); ``./dev test --fast`` asks
# for fewer, so that its quick loop keeps every model test (the Iceberg ones took most of its
# time) and the whole suite still explores as far as before.
MODEL_EXAMPLES_ENV = "SPARK_CDC_MODEL_EXAMPLES"
MODEL = settings(
    max_examples=int(os.environ.get(MODEL_EXAMPLES_ENV) or 60),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def expected(changes: list[Change], spec: ApplySpec) -> list[dict[str, Any]]:
    rules = {
        "ignore_null_updates": spec.ignore_null_updates,
        "changelog_pairs": spec.changelog_pairs,
    }
    if spec.scd_type == 1:
        rows = [{"id": k[0], **v} for k, v in scd1(changes, **rules).items()]
    else:
        rows = [
            {
                "id": k[0],
                **v.values,
                START_AT: v.start[0],
                END_AT: None if v.end is None else v.end[0],
            }
            for k, versions in scd2(changes, list(spec.tracked), **rules).items()
            for v in versions
        ]
    return sorted_rows(pa.Table.from_pylist(rows)) if rows else []


def target_schema(spec: ApplySpec) -> list[tuple[str, pa.DataType]]:
    fields = [("id", pa.int64()), ("a", pa.int64()), ("b", pa.string())]
    if spec.scd_type == 2:
        fields += [(START_AT, pa.int64()), (END_AT, pa.int64())]
    return fields


@st.composite
def feeds(draw: st.DrawFn, truncates: bool, conflicts: bool = False) -> list[Change]:
    """Changes of a few keys, some delivered twice; each key's sequences distinct unless
    ``conflicts`` (then two changes of a key may share one)."""
    changes = []
    for key in range(draw(st.integers(1, 4))):
        sequences = draw(
            st.lists(
                st.integers(0, 6 if conflicts else 15), min_size=1, max_size=6, unique=not conflicts
            )
        )
        for sequence in sequences:
            kind = draw(st.sampled_from(["upsert", "upsert", "upsert", "delete"]))
            values = {
                "a": draw(st.one_of(st.none(), st.integers(0, 3))),
                "b": draw(st.one_of(st.none(), st.sampled_from(["x", "y"]))),
            }
            changes.append(Change((key,), (sequence,), kind, values))
    if truncates and draw(st.booleans()):
        at = draw(st.one_of(st.integers(0, 15), st.sampled_from([c.sequence[0] for c in changes])))
        changes.append(Change((None,), (at,), "truncate"))
    duplicates = draw(st.lists(st.sampled_from(changes), max_size=3))
    return changes + duplicates


@st.composite
def batches(draw: st.DrawFn, changes: list[Change]) -> list[list[Change]]:
    """The feed in a random order, cut into 1 to 4 batches."""
    ordered = draw(st.permutations(changes))
    cuts = sorted(draw(st.lists(st.integers(0, len(ordered)), max_size=3)))
    bounds = [0, *cuts, len(ordered)]
    return [ordered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
