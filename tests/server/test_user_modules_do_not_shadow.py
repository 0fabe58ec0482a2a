"""A user's own modules named like our folders (``client``, ``rewrite``, ``server_plugin``)
or like modules of ours (``errors``, ``names``) do not shadow ours: the package is imported,
reads and post-processes against the test server from a folder holding them. The layers and
the wheel are tested without a server in tests/unit/test_packaging.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_users_client_and_rewrite_modules_do_not_shadow_ours(
    tmp_path: Path, spark_remote: str
) -> None:
    for name in ("client", "rewrite", "server_plugin", "errors", "names"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('the user\\'s own {name}')\n")
    program = (
        "from pyspark.sql import SparkSession\n"
        "from spark_cdc import ChangelogReader, ChangelogSpec, post_process\n"
        "import spark_cdc.rewrite, spark_cdc.server_plugin.delta.source\n"
        f"spark = SparkSession.builder.remote({spark_remote!r}).create()\n"
        "df = ChangelogReader(spark).option('rowId', 'id').changes('/nowhere')\n"
        "spec = ChangelogSpec(row_id=['id'])\n"
        "post_process(spark.range(1).selectExpr('id', \"'insert' _change_type\"), spec)\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")
