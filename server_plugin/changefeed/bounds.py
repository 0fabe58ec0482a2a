"""Where a read of a timeline of commits starts and ends, from the common range options
(``startingVersion`` / ``startingTimestamp`` / ``'earliest'`` / ``'latest'``, the ending
ones): one meaning for every format, each format giving only its versions and how it finds a
version by time (and, for Iceberg, a bound given as a snapshot id, already a version).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spark_cdc.server_plugin.changefeed.source_options import SourceOptions
from spark_cdc.server_plugin.errors import error

Lookup = Callable[[int], "int | None"]
"""A format's search by commit time: the version at (or after / before) a millisecond."""


def first_version(
    options: SourceOptions,
    versions: Sequence[int],
    first_at_or_after: Lookup,
    *,
    batch: bool,
    newest: int | None = None,
    from_bound: int | None = None,
) -> int | None:
    """The first version a read serves; for a stream None when it starts from the table's
    snapshot (the default) or after the latest commit (``'latest'``). ``versions``: the
    table's, oldest first; ``newest``: the version ``startingVersion`` may not pass (a
    stream's: the one it started at; else the last of ``versions``); ``from_bound``: a start
    the format resolved itself (an Iceberg snapshot id's version)."""
    if batch and options.starting_latest:
        raise error("INVALID_CDC_OPTION.LATEST_IN_BATCH")
    inclusive = 0 if options.starting_inclusive else 1
    latest = newest if newest is not None else (versions[-1] if versions else 0)
    if from_bound is not None:
        return from_bound + inclusive
    if options.starting_version is not None:
        if options.starting_version > latest:
            raise starting_after_latest(options.starting_version, latest)
        return options.starting_version + inclusive
    if options.starting_earliest:  # commits before the oldest were cleaned up: not data loss
        return versions[0] if versions else 0
    if options.starting_timestamp_ms is not None:
        found = first_at_or_after(options.starting_timestamp_ms + inclusive)
        if found is not None:
            return found
        if batch:
            raise error("INVALID_CDC_OPTION.STARTING_TIMESTAMP_AFTER_LATEST")
        # Nothing recorded that late: the next commit will be.
        return (versions[-1] if versions else latest) + 1
    return 0 if batch else None


def last_version(
    options: SourceOptions, latest: int, last_at_or_before: Lookup, to_bound: int | None = None
) -> int:
    """The last version a batch read serves (``first > last``: an empty range); ``to_bound``
    an end the format resolved itself (an Iceberg snapshot id's version)."""
    ending = 0 if options.ending_inclusive else 1
    if to_bound is not None:
        return to_bound - ending
    if options.ending_version is not None:
        return min(latest, options.ending_version - ending)
    if options.ending_timestamp_ms is not None:
        found = last_at_or_before(options.ending_timestamp_ms - ending)
        return found if found is not None else -1
    return latest


def starting_after_latest(version: int, latest: int) -> Exception:
    return error(
        "INVALID_CDC_OPTION.STARTING_VERSION_AFTER_LATEST",
        startingVersion=version,
        latestVersion=latest,
    )
