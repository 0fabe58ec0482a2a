"""The package's PySpark patches are in place after any first import, in a fresh interpreter
each time: the Update/Complete output-mode guard (tests/server/test_output_mode_guard.py
tests what it refuses) and the conversion of our server errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter per case: about 1 s each, idle


@pytest.mark.parametrize(
    "first_import",
    [
        "from spark_cdc.rewrite import post_process",
        "import spark_cdc.rewrite.options",
        "from spark_cdc import ChangelogReader",
        "import spark_cdc",
        "import pyspark.sql.connect.dataframe; import spark_cdc",
    ],
)
def test_any_first_import_works_and_installs_the_guard(first_import: str) -> None:
    """A fresh interpreter: no earlier import may hide a cycle, and the guard and the
    server-error conversion are in place whether PySpark's Connect client loads before or
    after the package."""
    check = (
        f"{first_import}\n"
        "from pyspark.sql.connect.streaming.readwriter import DataStreamWriter\n"
        "import pyspark.sql.connect.client.core as core\n"
        "from pyspark.sql.connect.streaming.query import StreamingQuery\n"
        "assert DataStreamWriter._start_internal._spark_cdc_guarded\n"
        "assert core.convert_exception._spark_cdc_converted\n"
        "assert StreamingQuery.exception._spark_cdc_converted\n"
    )
    _passes_in_a_fresh_interpreter(check)


@pytest.mark.parametrize("checkpoint", [None, "/tmp/no-such-checkpoint"])
def test_the_apply_sink_and_its_writers_are_made_without_loading_the_engine(
    checkpoint: str | None,
) -> None:
    """Spark makes the ``spark_cdc_apply`` data source and its writer in Python processes
    that start at a stream's first micro-batch and never write a row (``sink``'s
    docstring): unpickling the sink there, its schema, making a batch or stream writer and
    pickling it load no Arrow, numpy, delta-rs, pyiceberg or pandas beyond what PySpark's
    data source classes load (4.0's load numpy; ours would add about 0.1 s to the stream's
    first micro-batch, measured on a stock 4.3 server)."""
    check = (
        "import sys, pickle, pyspark.sql.datasource\n"
        "from pyspark import cloudpickle\n"
        "from pyspark.sql.types import StructType\n"
        "def roots(): return {m.split('.')[0] for m in sys.modules}\n"
        "before = roots()\n"
        "from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec\n"
        "from spark_cdc.server_plugin.sinks.apply.sink import ApplyChangesSink, spec_options\n"
        "spec = ApplySpec(target='/tmp/t', state='/tmp/s', keys=('k',), columns=('k',),\n"
        "    sequence_names=('seq',), scd_type=1, tracked=('k',), ignore_null_updates=False,\n"
        "    changelog_pairs=False, schema_evolution=False, app_id='a',\n"
        f"    checkpoint={checkpoint!r})\n"
        "sink = ApplyChangesSink(spec_options(spec))\n"
        "sink.schema()\n"
        "for made in (sink.writer(StructType(), False), sink.streamWriter(StructType(), False)):\n"
        "    pickle.loads(cloudpickle.dumps(made))\n"
        "engine = {'pyarrow', 'numpy', 'deltalake', 'pyiceberg', 'pandas'}\n"
        "heavy = sorted((roots() - before) & engine)\n"
        "assert heavy == [], heavy\n"
    )
    _passes_in_a_fresh_interpreter(check)


def _passes_in_a_fresh_interpreter(check: str) -> None:
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
