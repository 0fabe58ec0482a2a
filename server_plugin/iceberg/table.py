"""Opening the Iceberg table a read names: a table folder (the one holding ``metadata/``)
or one of its ``*.metadata.json`` files, with the ``storage.<KEY>`` options as pyiceberg's
table and FileIO properties (object-store credentials and endpoints, and ``py-io-impl``,
which chooses the FileIO class).

A folder has no catalog to say which metadata file is current: the folder's listing
decides (``metadata_files``), through the FileIO's own filesystem, so a folder in an object
store is listed with the same credentials its files are read with.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from spark_cdc.server_plugin.errors import ChangelogSourceError, error
from spark_cdc.server_plugin.iceberg.metadata_files import current_metadata, metadata_version


def open_table(path: str, storage: Mapping[str, str]) -> Any:
    """The table at ``path`` (a folder or a metadata file) as pyiceberg's ``StaticTable``."""
    from pyiceberg.exceptions import ValidationError
    from pyiceberg.table import StaticTable

    properties = dict(storage)
    location = path if _is_metadata_file(path) else _current_metadata_file(path, properties)
    try:
        return StaticTable.from_metadata(location, properties)
    except (OSError, ValueError, ValidationError) as problem:  # missing, or not metadata
        raise _unreadable(path, problem) from problem


def _is_metadata_file(path: str) -> bool:
    name = posixpath.basename(path.rstrip("/"))
    return metadata_version(name) is not None or name.endswith(".metadata.json")


def _current_metadata_file(folder: str, properties: dict[str, str]) -> str:
    from pyarrow.fs import FileSelector, FileType
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import PyArrowFileIO

    metadata = folder.rstrip("/") + "/metadata"
    try:
        io = load_file_io(properties, folder)
    except ValueError as problem:
        raise _unreadable(folder, problem) from problem
    if not isinstance(io, PyArrowFileIO):
        raise error("ICEBERG_CHANGELOG.FOLDER_NOT_LISTABLE", path=folder, io=type(io).__name__)
    parsed = urlparse(metadata)
    filesystem = io.fs_by_scheme(parsed.scheme or "file", parsed.netloc)
    listed = parsed.netloc + parsed.path if parsed.scheme not in ("", "file") else parsed.path
    try:
        infos = filesystem.get_file_info(FileSelector(listed, allow_not_found=True))
    except OSError as problem:
        raise _unreadable(folder, problem) from problem
    names = [i.base_name for i in infos if i.type == FileType.File]
    hints = [n for n in names if n.startswith("version-hint.")]
    hint = None
    if hints:
        with io.new_input(f"{metadata}/{hints[0]}").open() as stream:
            hint = stream.read().decode("utf-8", "replace")
    current = current_metadata(names, hint)
    if current is None:
        raise error("ICEBERG_CHANGELOG.NOT_AN_ICEBERG_TABLE", path=folder)
    return f"{metadata}/{current}"


def _unreadable(path: str, problem: Exception) -> ChangelogSourceError:
    reason = (
        str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
    )
    return error("ICEBERG_CHANGELOG.UNREADABLE_TABLE", path=path, reason=reason)
