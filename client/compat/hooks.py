"""Patching PySpark's Connect client when it loads, never before.

The package's root runs wherever ``spark_cdc`` is imported, the server's Python workers
included (they import ``spark_cdc.server_plugin``). Importing PySpark's Connect client
there would cost each worker about a second and 550 modules, and every task's garbage
collection with them (measured: 3 ms -> 14 ms per ``gc.collect``). So the root asks for its
patches by module name: a module already loaded is patched at once, any other the moment it
is first imported, which on a server is never.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

Patch = Callable[[ModuleType], None]
_lock = threading.Lock()


def when_imported(module_name: str, patch: Patch) -> None:
    """Run ``patch(module)`` once ``module_name`` is imported (now, if it already is)."""
    with _lock:
        module = sys.modules.get(module_name)
        if module is None:
            sys.meta_path.insert(0, _PatchOnLoad(module_name, patch))
            return
    patch(module)


class _PatchOnLoad(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds nothing itself: for its one module it wraps the real loader, so the patch runs
    right after the module's code, before anyone can use it."""

    def __init__(self, name: str, patch: Patch) -> None:
        self.name, self.patch = name, patch
        self.loader: Any = None

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.patch(module)
