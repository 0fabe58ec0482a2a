"""``spark-cdc --version``: this package's version and its PySpark's, and with ``--remote``
the server's Spark version.

Which Spark a server runs decides what its sources can do (4.0/4.1 lack 4.2+'s admission
control), so it is the first thing to ask when a read works on one server and not another.
argparse's own ``version`` action prints a fixed string and exits, before any server could
be asked; without ``--remote`` this needs no PySpark and no server.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "spark-cdc-connect"


def ours() -> str:
    """This package's version, and the PySpark and Python it runs on."""
    try:
        line = f"spark-cdc {version(DISTRIBUTION)}"
    except PackageNotFoundError:  # run from a source folder that was never installed
        line = "spark-cdc (not installed)"
    python = ".".join(map(str, sys.version_info[:3]))
    if importlib.util.find_spec("pyspark") is None:
        return f"{line} (no PySpark, Python {python})"
    from pyspark.version import __version__ as pyspark

    return f"{line} (PySpark {pyspark}, Python {python})"


def run(args: argparse.Namespace) -> int:
    print(ours(), flush=True)
    if args.remote:
        from spark_cdc.cli.commands import session

        with session(args.remote, args.token) as spark:
            print(f"server: Spark {spark.version}", flush=True)
    return 0
