"""The Spark version the tests run against: the client's pyspark, which the harness's
servers share (a local server from the same install, a container built for it)."""

from __future__ import annotations

import pyspark

SPARK = tuple(int(p) for p in pyspark.__version__.split(".")[:2])
# Python sources get admission control and SupportsTriggerAvailableNow in Spark 4.2.
ADMISSION_CONTROL = SPARK >= (4, 2)
