"""Which metadata file is a table folder's current one.

A table given as a folder (the one holding ``metadata/``) has no catalog to say which
``*.metadata.json`` is current. Writers name them ``v<N>.metadata.json`` (Hadoop tables,
optionally ``.gz``) or ``<N>-<uuid>.metadata.json`` (catalogs), N growing with each commit;
Hadoop tables also keep a ``version-hint`` (``.text``, some writers ``.txt``), which may be
empty or behind: Iceberg's own Hadoop table reads the hint and then looks for newer files.
So the newest numbered file wins, and the hint only breaks ties between names of one N.
pyiceberg's ``StaticTable`` reads only ``version-hint.text`` and refuses the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NUMBERED = re.compile(r"^(?:v(\d+)|(\d+)-[0-9a-fA-F-]+)(?:\.gz)?\.metadata\.json(?:\.gz)?$")


def metadata_version(name: str) -> int | None:
    """The commit number in a metadata file's name, or None when it is not one."""
    found = _NUMBERED.match(name)
    if found is None:
        return None
    return int(found.group(1) or found.group(2))


def current_metadata(names: Iterable[str], hint: str | None = None) -> str | None:
    """The current metadata file among ``names`` (the files of ``metadata/``), given the
    version hint's text; None when the folder holds none."""
    numbered = [(v, n) for n in names if (v := metadata_version(n)) is not None]
    if not numbered:
        return None
    newest = max(v for v, _ in numbered)
    candidates = sorted(n for v, n in numbered if v == newest)
    hinted = (hint or "").strip()
    for name in candidates:
        if hinted and (name == hinted or name.startswith(f"v{hinted}.")):
            return name
    return candidates[0]
