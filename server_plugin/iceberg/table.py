"""Opening the Iceberg table a read names: a table folder (the one holding ``metadata/``),
one of its ``*.metadata.json`` files, or, given ``catalog.<KEY>`` options (pyiceberg catalog
properties: ``type``, ``uri``, ``warehouse``...), a table name in that catalog. The
``storage.<KEY>`` options are pyiceberg's table and FileIO properties (object-store
credentials and endpoints, and ``py-io-impl``, which chooses the FileIO class).

A catalog is built from the options alone, under a name no configuration file uses: a
server's ``~/.pyiceberg.yaml`` or ``PYICEBERG_*`` variables would otherwise change what a
read means without the reader knowing.

A folder has no catalog to say which metadata file is current: the folder's listing
decides (``metadata_files``), through the FileIO's own filesystem, so a folder in an object
store is listed with the same credentials its files are read with. A listing can show a
metadata file its writer is still writing: pyiceberg's catalogs write it in place, and a
local or HDFS file is visible, empty, from its creation. So a folder's current file that
does not parse is listed and read again a few times (``SETTLING_WAITS``, 1.5 s in all) before the
read is refused: a commit in flight settles in milliseconds, a broken file stays broken.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from spark_cdc.server_plugin.errors import ChangelogSourceError, error
from spark_cdc.server_plugin.iceberg.metadata_files import current_metadata, metadata_version

# A catalog's name when ``catalog.name`` is not given: pyiceberg's ``load_catalog()``'s, so
# a SQL catalog's tables (filed under its name) are the ones a user's own pyiceberg lists.
CATALOG_NAME = "default"
# The name used before: a SQL catalog's tables made then are filed under it, and are found
# there when the default name holds no such table.
LEGACY_CATALOG_NAME = "spark_cdc_iceberg_changelog"

# Seconds to wait before each new listing when a folder's current metadata file does not parse.
SETTLING_WAITS = (0.05, 0.15, 0.3, 0.4, 0.6)


def open_table(
    path: str, storage: Mapping[str, str], catalog: Mapping[str, str] | None = None
) -> Any:
    """The table at ``path`` (a folder or a metadata file; a table name with ``catalog``) as
    pyiceberg's ``StaticTable`` (a catalog's ``Table``)."""
    if catalog:
        return _catalog_table(path, storage, catalog)
    properties = dict(storage)
    if _is_metadata_file(path):
        return _static(path, path, properties)
    for wait in SETTLING_WAITS:
        try:
            return _static(path, _current_metadata_file(path, properties), properties)
        except ChangelogSourceError as refused:
            if refused.condition != "ICEBERG_CHANGELOG.UNREADABLE_TABLE":
                raise
        time.sleep(wait)
    return _static(path, _current_metadata_file(path, properties), properties)


def _static(path: str, location: str, properties: dict[str, str]) -> Any:
    from pyiceberg.exceptions import ValidationError
    from pyiceberg.table import StaticTable

    try:
        return StaticTable.from_metadata(location, properties)
    except (OSError, ValueError, ValidationError) as problem:  # missing, or not metadata
        raise _unreadable(path, problem, location) from problem


def _catalog_table(path: str, storage: Mapping[str, str], catalog: Mapping[str, str]) -> Any:
    from pyiceberg.exceptions import NoSuchTableError

    missing = None
    for name in catalog_names(catalog):
        try:
            found = catalog_from({**storage, **catalog}, name)
        except Exception as problem:  # pyiceberg raises any kind for a bad catalog setting
            raise _unreadable(path, problem) from problem
        try:
            return found.load_table(path)
        except NoSuchTableError as problem:
            missing = problem
        except Exception as problem:  # a catalog's own errors: connection, authorization...
            raise _unreadable(path, problem) from problem
    raise error("ICEBERG_CHANGELOG.NOT_AN_ICEBERG_TABLE", path=path) from missing


def catalog_names(catalog: Mapping[str, str]) -> list[str | None]:
    """The names a table of the catalog is looked for under: its own, or the default
    and then the legacy one."""
    if "name" in {k.lower() for k in catalog}:
        return [None]
    return [CATALOG_NAME, LEGACY_CATALOG_NAME]


def catalog_from(properties: dict[str, Any], name: str | None = None) -> Any:
    """pyiceberg's ``load_catalog`` from the properties alone (it would merge the server's
    configuration files in): ``name`` (what SQL catalogs file tables under; the
    properties' own ``name``, else ``CATALOG_NAME`` unless given), ``type`` or a ``uri`` it
    can be told from, and the catalog's own properties."""
    from pyiceberg.catalog import AVAILABLE_CATALOGS, CatalogType, infer_catalog_type

    properties = dict(properties)
    name = properties.pop("name", name or CATALOG_NAME)
    kind = properties.get("type")
    found = CatalogType(kind.lower()) if kind else infer_catalog_type(name, properties)
    if found is None:
        raise ValueError("no catalog.type (rest, sql, hive, glue...) and no catalog.uri")
    return AVAILABLE_CATALOGS[found](name, properties)


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


def _unreadable(path: str, problem: Exception, location: str | None = None) -> ChangelogSourceError:
    """UNREADABLE_TABLE for ``path``, its reason the problem's first line, preceded by the
    metadata file's name when the folder's listing chose it."""
    reason = (
        str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
    )
    if location is not None and location != path:
        reason = f"{posixpath.basename(location)}: {reason}"
    return error("ICEBERG_CHANGELOG.UNREADABLE_TABLE", path=path, reason=reason)
