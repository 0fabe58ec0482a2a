"""Pure plan rewriting: a change-feed DataFrame in, a post-processed DataFrame out.

Nothing here imports the client layer above it. Importing ``spark_cdc.rewrite`` runs the
package's ``spark_cdc/__init__`` first, which arranges the stream-start guard, so a stream
holding a rewrite is guarded however it was built.

The names below load on first use: the package's patches import
``spark_cdc.rewrite.pyspark_internals`` while PySpark's Connect client is still loading,
when importing ``post_process`` (which imports that client) would fail half-way.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_cdc.rewrite.options import CdcOptions, DeduplicationMode, parse_options
    from spark_cdc.rewrite.post_process import post_process
    from spark_cdc.rewrite.spec import ChangelogSpec

_EXPORTS = {
    "CdcOptions": "spark_cdc.rewrite.options",
    "ChangelogSpec": "spark_cdc.rewrite.spec",
    "DeduplicationMode": "spark_cdc.rewrite.options",
    "parse_options": "spark_cdc.rewrite.options",
    "post_process": "spark_cdc.rewrite.post_process",
}
__all__ = ["CdcOptions", "ChangelogSpec", "DeduplicationMode", "parse_options", "post_process"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'spark_cdc.rewrite' has no attribute '{name}'")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """Importing the submodule ``spark_cdc.rewrite.post_process`` sets the package's
    ``post_process`` to that module; the package keeps the function of that name instead,
    as it did when it imported it eagerly."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
