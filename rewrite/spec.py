"""What a changelog promises about itself: Spark's ``Changelog`` capability flags."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spark_cdc.rewrite.errors import cdc_error


@dataclass(frozen=True)
class ChangelogSpec:
    """Row identity and capabilities of a change feed, as a DSv2 ``Changelog`` declares them.

    ``row_id`` has Spark's meaning and one of ours:

    - columns, e.g. ``["id"]``: the row id, as Spark's ``Changelog.rowId()``;
    - ``[]``: Spark's "this changelog declares no row id". As in Spark 4.3
      (``ChangelogTable.validateSchema``), that is legal only for a changelog that needs no
      post-processing, one declaring none of ``contains_carryover_rows``,
      ``represents_update_as_delete_and_insert`` and ``contains_intermediate_changes``: its
      rows pass through as they are (only the range options apply). Any of the three
      flags with ``[]`` is refused with ``INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID``,
      whatever the options;
    - ``None`` (our extension, what ``ChangelogReader`` uses without ``rowId``): rows are
      identified by their whole content. That finds carry-overs (a delete and an insert of
      one identical row in one commit) but not updates or net changes, which need to know
      that two different rows are one, so those passes refuse it when asked for.

    ``row_version=None`` means carry-overs are found by comparing the two rows' images
    (every non-metadata column) instead of a version column.

    Parameters
    ----------
    row_id : sequence of str or None
        The row id's columns (a single name is taken as one column), ``[]`` or ``None``.
    row_version : str, optional
        A column that orders a row id's versions; carry-overs are then a delete and an
        insert of one row id with the same version.
    contains_carryover_rows : bool, default True
        Spark's capability flag: a commit may rewrite rows unchanged (carry-overs).
    represents_update_as_delete_and_insert : bool, default True
        Spark's capability flag: an update is a delete and an insert of one row id.
    contains_intermediate_changes : bool, default True
        Spark's capability flag: a row id may change more than once in the range.

    Examples
    --------
    A Delta change data feed read with Delta Lake on the server (``readChangeFeed``)
    writes updates as pre- and post-images, so it declares none of that:

    >>> from spark_cdc import ChangelogSpec, post_process
    >>> spec = ChangelogSpec(
    ...     row_id=["id"],
    ...     contains_carryover_rows=False,
    ...     represents_update_as_delete_and_insert=False,
    ... )
    >>> spec.row_id
    ('id',)
    >>> out = post_process(feed, spec, {"deduplicationMode": "netChanges"})  # doctest: +SKIP
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
        if any(not isinstance(c, str) or not c.strip() for c in row_id):
            raise cdc_error("INVALID_CHANGELOG_SCHEMA.INVALID_ROW_ID", rowId=repr(self.row_id))
        declared = [name for name in _POST_PROCESSING_FLAGS if getattr(self, name)]
        if not row_id and declared:
            raise cdc_error("INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID", flags=", ".join(declared))
        object.__setattr__(self, "row_id", row_id)


# Spark's capability flags that each need a row id to act on (ChangelogTable.validateSchema).
_POST_PROCESSING_FLAGS = (
    "contains_carryover_rows",
    "represents_update_as_delete_and_insert",
    "contains_intermediate_changes",
)
