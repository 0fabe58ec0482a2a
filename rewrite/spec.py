"""What a changelog promises about itself: Spark's ``Changelog`` capability flags."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from client.errors import CdcAnalysisException


@dataclass(frozen=True)
class ChangelogSpec:
    """Row identity and capabilities of a change feed, as a DSv2 ``Changelog`` declares them.

    ``row_version=None`` means carry-overs are found by comparing the two rows' images
    (every non-metadata column) instead of a version column. ``row_id=None`` is for feeds
    without one: a row is identified by its whole content, which is enough to find
    carry-overs (a delete and an insert of one identical row in one commit) but not
    updates or net changes, which need to know that two different rows are one.
    """

    row_id: Sequence[str] | None
    row_version: str | None = None
    contains_carryover_rows: bool = True
    represents_update_as_delete_and_insert: bool = True
    contains_intermediate_changes: bool = True

    def __post_init__(self) -> None:
        if self.row_id is None:  # rows identified by their whole content
            return
        row_id = (self.row_id,) if isinstance(self.row_id, str) else tuple(self.row_id)
        if not row_id or any(not isinstance(c, str) or not c.strip() for c in row_id):
            raise CdcAnalysisException(
                "INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID",
                f"The changelog's row id must name one or more columns, got {self.row_id!r}: "
                "pass the column(s) that identify a row, e.g. row_id=['id'].",
            )
        object.__setattr__(self, "row_id", row_id)
