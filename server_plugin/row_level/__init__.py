"""``spark_cdc.server_plugin.row_level``: carry-over removal and update detection on a
commit's rows, inside the source, so that a source can hand Spark a resolved change feed.

The rules are those of the client's plans (``spark_cdc.rewrite.row_level``); here they are
applied to Arrow data with numpy and pyarrow compute:

- ``rules``: what to resolve (``RowLevelRules``), ``resolve``, grouping rows by row id, the
  change kinds, and the contract violations the client's plans raise;
- ``equality``: whether two rows are equal, as the client's plans compare them;
- ``hashing``: a 64-bit row hash, alike for rows ``equality`` finds equal;
- ``arrays``: the Arrow and numpy helpers both read arrays with.

A server-side leaf: it imports only leaves of ``spark_cdc.server_plugin`` (``arrow_types``,
``errors``, ``vocabulary``), pyarrow and numpy. Nothing is re-exported here: import each name
from the module that defines it.
"""
