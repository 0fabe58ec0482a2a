"""A stream's checkpoint set aside for a full refresh, and the writer a checkpoint names.

A full refresh of a stream starts over from its feed's start in a new checkpoint at the
same location; the old one is kept beside it (nothing is deleted: a person decides when
it goes). The new checkpoint names the refresh's writer generation (``binding.REFRESH``)
in a file of its own (Spark keeps only its own folders and ``metadata`` there), so every
later run of the stream applies its batches as that writer, also one started without
``full_refresh`` after a stop before the refresh's first batch: its batches are never
taken for the old checkpoint's, which the tables' markers count.

Done on the server, which sees the checkpoint's filesystem as Spark does (a client may see
another one, or none); a checkpoint on an object store, where a folder cannot be renamed
at once, is refused.
"""

from __future__ import annotations

import os
import time

from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.local_paths import local_root

ASIDE = ".before-full-refresh-"
WRITER_FILE = "_spark_cdc_writer"


def set_aside(location: str, writer: str) -> str | None:
    """The checkpoint folder at ``location`` renamed to ``<location>.before-full-refresh-
    <UTC time>`` (that name is returned; None when there was none), and a new one made
    there naming ``writer``."""
    folder = _folder(location)
    aside = None
    if os.path.exists(folder):
        stamp = folder + ASIDE + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside, n = stamp, 0
        while os.path.exists(aside):
            n += 1
            aside = f"{stamp}-{n}"
        os.rename(folder, aside)
    os.makedirs(folder)
    temporary = os.path.join(folder, f".{WRITER_FILE}.tmp")
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(writer)
    os.rename(temporary, os.path.join(folder, WRITER_FILE))
    return aside


def writer(location: str | None) -> str | None:
    """The writer generation the checkpoint at ``location`` names (None: it names none,
    or it is not on a local filesystem, where a full refresh never made it)."""
    folder = None if location is None else local_root(location)
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, WRITER_FILE), encoding="utf-8") as named:
            return named.read().strip() or None
    except FileNotFoundError:
        return None


def _folder(location: str) -> str:
    folder = local_root(location)
    if folder is None:
        raise error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="checkpoint_location",
            problem=f"is '{location}', on an object store, where a full refresh cannot set "
            "the stream's checkpoint aside",
            fix="apply the feed from its start with a batch call and full_refresh=True, then "
            "start the stream with a new checkpoint_location",
        )
    return folder.rstrip("/")
