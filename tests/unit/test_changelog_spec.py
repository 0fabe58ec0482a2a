"""The empty row id (``row_id=[]``, Spark's "declares none") refused by ``ChangelogSpec``
itself, without a server, whenever the changelog declares any of
``containsCarryoverRows``, ``representsUpdateAsDeleteAndInsert`` or
``containsIntermediateChanges`` (Spark 4.3's ``ChangelogTable.validateSchema``). What an
empty row id does with none of them is in tests/server/test_row_id.py."""

from __future__ import annotations

import itertools

import pytest
from pyspark.errors import AnalysisException
from spark_cdc import ChangelogSpec

FLAGS = (
    "contains_carryover_rows",
    "represents_update_as_delete_and_insert",
    "contains_intermediate_changes",
)
FLAG_SETS = [
    dict(zip(FLAGS, values, strict=True)) for values in itertools.product([False, True], repeat=3)
]


def _name(flags: dict[str, bool]) -> str:
    return "+".join(f for f in FLAGS if flags[f]) or "no_flags"


@pytest.mark.plan_only
@pytest.mark.parametrize("flags", [f for f in FLAG_SETS if any(f.values())], ids=_name)
def test_an_empty_row_id_is_refused_with_any_post_processing_flag(flags: dict[str, bool]) -> None:
    with pytest.raises(AnalysisException) as caught:
        ChangelogSpec(row_id=[], **flags)
    error = caught.value
    assert error.getCondition() == "INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID"
    declared = [f for f in FLAGS if flags[f]]
    assert error.getMessageParameters() == {"flags": ", ".join(declared)}
    assert str(error).startswith("[INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID] ")
    assert all(f in str(error) for f in declared)
