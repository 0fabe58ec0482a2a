"""What every change-feed source shares, whatever its format: the common options
(``source_options``), the declared schema (``changelog_schema``), commit timestamps, stream
offsets and admission control, partition planning (``partitions``), reading planned files
into Spark's changelog rows (``change_batches``) with the row-level passes resolved per
commit (``resolving_reader``), and the one stream reader over a timeline of commits
(``stream_reader``) each format subclasses. Also the ``cdc_sample_changelog`` stand-in the
demo and tests use.

Imports the root of ``spark_cdc.server_plugin`` and ``row_level``; never a format or a sink.
"""
