"""Runs inside the Spark Connect server (shipped there as the ``[server]`` extra, discovered
by name): Python data sources that serve change feeds, and data source writers (sinks) that
apply them. Its folders are its parts; each imports only the ones above it in this list:

- the root: what every part shares — the error condition registry (``conditions``,
  ``errors``), Spark's CDC vocabulary (``vocabulary``), the option registry
  (``cdc_options``), Arrow type helpers (``arrow_types``), the optional dependencies
  (``dependencies``), registration by value (``registration``) and the protocol number the
  clients check (``server_info``);
- ``row_level``: the row-level passes (carry-over removal, update detection) on Arrow data;
- ``changefeed``: what every change-feed source shares — options, offsets, admission
  control, partition planning, the reader that resolves the passes per commit, and the one
  stream reader over a timeline of commits (``stream_reader``);
- one folder per format (``delta``, ``iceberg``): how it lists its commits and reads their
  files, nothing of the streaming protocol. A new format goes beside them;
- ``sinks``: the data source writers (``apply``: ``apply_changes``' engine; ``spool``: the
  command line's live feed). A new sink goes there; it may use a format's table access.

Nothing imports ``sinks``; formats do not import each other. tests/unit/test_packaging.py
holds these rules.
"""
