"""Whether a table or checkpoint URI is on this machine's filesystem, and where: one answer
for every part (a Delta log's reads and commits, a stream checkpoint's writer file). It
loads nothing: the process Spark starts only to make a stream's writer asks it
(``sinks.apply.checkpoints``), and needs none of the Delta modules that held it (with
delta-rs, about 0.1 s of every stream's first micro-batch)."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse


def local_root(uri: str) -> str | None:
    """The folder ``uri`` names when it is on a local filesystem (None: an object store)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    if not parsed.scheme or (len(parsed.scheme) == 1 and os.name == "nt"):
        return os.path.abspath(uri)
    return None
