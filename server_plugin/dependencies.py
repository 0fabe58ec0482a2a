"""The third-party packages the server-side sources need, checked where they are needed.

A Spark Connect server lists every Python data source it discovers, whatever its Python
lacks; without this check a missing ``deltalake`` surfaced on every read as
``PYTHON_DATA_SOURCE_ERROR``, a worker traceback and a JVM stack trace, with no word about
the package (issue 27). The check imports the package instead of only looking for it, so it
tells the truth about what the worker can use, and it names the exact ``pip install`` for
the Python that runs it: the server's, which is not always the user's.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import sys
from typing import NamedTuple

from spark_cdc.server_plugin.errors import ChangelogSourceError, error


class Requirement(NamedTuple):
    package: str
    minimum: tuple[int, ...]
    why: str
    below: tuple[int, ...] | None = None  # the first release it may not work with

    @property
    def specifier(self) -> str:
        upper = "" if self.below is None else f",<{'.'.join(map(str, self.below))}"
        return f"{self.package}>={'.'.join(map(str, self.minimum))}{upper}"


DELTALAKE = Requirement("deltalake", (1, 4, 2), "reads Delta tables and their deletion vectors")
"""The ``server`` extra in pyproject.toml asks for the same (a test holds them together)."""
PYARROW = Requirement("pyarrow", (15,), "carries every row the sources read")
NUMPY = Requirement("numpy", (1,), "resolves the row-level passes")
PYICEBERG = Requirement(
    "pyiceberg",
    (0, 12),
    "reads Iceberg tables' metadata, manifests and delete files",
    below=(0, 13),  # the Iceberg source reads v3 manifest fields through its internals
)
"""As DELTALAKE: the ``server`` extra asks for the same."""
ADBC_POSTGRESQL = Requirement(
    "adbc_driver_postgresql", (1, 0), "reads PostgreSQL's tables and log as Arrow"
)
"""As DELTALAKE: the ``server`` extra asks for the same (as adbc-driver-postgresql)."""
SERVER_REQUIREMENTS = (PYARROW, NUMPY, DELTALAKE, PYICEBERG, ADBC_POSTGRESQL)


def missing(requirement: Requirement, load: bool = True) -> str | None:
    """Why ``requirement`` cannot be used by this Python, or None when it can. ``load=False``
    only looks for it (found, and of a fitting release), without importing it: for a
    process that never uses it, such as the one Spark starts only to make a stream's
    writer, where importing delta-rs cost about 0.1 s of the stream's first micro-batch.
    The processes that use it then check it loaded."""
    if load:
        try:
            module = importlib.import_module(requirement.package)
        except ImportError as problem:
            return f"has no usable '{requirement.package}' package ({problem})"
        version = getattr(module, "__version__", None) or _installed_version(requirement.package)
    elif importlib.util.find_spec(requirement.package) is None:
        return f"has no usable '{requirement.package}' package (not installed)"
    else:
        version = _installed_version(requirement.package)
    if version is not None and _release(version) < requirement.minimum:
        return f"has '{requirement.package}' {version}, older than {requirement.specifier}"
    if version is not None and requirement.below and _release(version) >= requirement.below:
        return f"has '{requirement.package}' {version}, newer than {requirement.specifier}"
    return None


# The condition a source's missing package raises (the Delta one for everything else).
_MISSING = {
    "iceberg_changelog": "ICEBERG_CHANGELOG.MISSING_DEPENDENCY",
    "postgres_changelog": "POSTGRES_CHANGELOG.MISSING_DEPENDENCY",
}


def require(requirement: Requirement, source: str, load: bool = True) -> None:
    """Raise the source's ``MISSING_DEPENDENCY`` when this Python cannot use
    ``requirement``, naming it and the command that installs it here (``load``: as
    ``missing``'s)."""
    problem = missing(requirement, load)
    if problem is not None:
        raise missing_dependency(requirement, problem, f"the {source} source", source=source)


def missing_dependency(
    requirement: Requirement,
    problem: str,
    needed_by: str,
    python: str = "The Spark Connect server's Python",
    then: str = "then restart the server",
    source: str = "",
) -> ChangelogSourceError:
    return error(
        _MISSING.get(source, "DELTA_CHANGELOG.MISSING_DEPENDENCY"),
        pythonRole=python,
        python=sys.executable,
        problem=problem,
        neededBy=needed_by,
        why=requirement.why,
        package=requirement.package,
        requirement=requirement.specifier,
        then=then,
    )


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string: '1.6.6' -> (1, 6, 6), '2.0.0rc1' -> (2, 0, 0)."""
    numbers = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(n) for n in numbers.group(0).split(".")) if numbers else ()


def for_missing_module(error: ModuleNotFoundError) -> Requirement | None:
    """Which of the server's requirements an import failure is about, if any."""
    top = (error.name or "").split(".")[0]
    return next((r for r in SERVER_REQUIREMENTS if r.package == top), None)


def discovered(module: str, attribute: str, name: str) -> type:
    """A ``pyspark_*`` discovery module's ``DefaultSource``: ``attribute`` of ``module``, or,
    when the server's Python lacks a package it imports, a stand-in that names it."""
    try:
        return getattr(importlib.import_module(module), attribute)
    except ModuleNotFoundError as problem:
        needed = for_missing_module(problem)
        if needed is None:
            raise
        return unavailable_source(name, needed, f"has no '{needed.package}'")


def unavailable_source(name: str, requirement: Requirement, problem: str) -> type:
    """A stand-in for a source or sink whose imports failed: Spark still lists ``name``,
    and every use of it says which package is missing instead of that it does not exist."""
    from pyspark.sql.datasource import DataSource

    def refuse(*_: object) -> None:
        raise missing_dependency(requirement, problem, f"the {name} source", source=name)

    return type(
        "UnavailableSource",
        (DataSource,),
        {
            "__module__": __name__,
            "name": classmethod(lambda cls: name),
            "schema": refuse,
            "reader": refuse,
            "streamReader": refuse,
            "writer": refuse,
            "streamWriter": refuse,
        },
    )
