"""A stream's checkpoint set aside for a full refresh: the stream then starts over from
its feed's start in a new checkpoint at the same location, and the old one is kept beside
it (nothing is deleted: a person decides when it goes). Done on the server, which sees the
checkpoint's filesystem as Spark does; a client may see another one, or none.
"""

from __future__ import annotations

import os
import time

from spark_cdc.server_plugin.delta.committer import local_root
from spark_cdc.server_plugin.errors import error

ASIDE = ".before-full-refresh-"


def set_aside(location: str) -> str | None:
    """The checkpoint folder at ``location`` renamed to ``<location>.before-full-refresh-
    <UTC time>``; that name, or None when there was none. A checkpoint on an object store,
    where a folder cannot be renamed at once, is refused."""
    folder = local_root(location)
    if folder is None:
        raise error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="checkpoint_location",
            problem=f"is '{location}', on an object store, where a full refresh cannot set "
            "the stream's checkpoint aside",
            fix="delete the checkpoint yourself, then start the stream again with "
            "full_refresh=True",
        )
    folder = folder.rstrip("/")
    if not os.path.exists(folder):
        return None
    aside = folder + ASIDE + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    suffix = 0
    while os.path.exists(aside if not suffix else f"{aside}-{suffix}"):
        suffix += 1
    aside = aside if not suffix else f"{aside}-{suffix}"
    os.rename(folder, aside)
    return aside
