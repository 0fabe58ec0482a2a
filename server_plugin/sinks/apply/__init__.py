"""``apply_changes``' writer: SCD type 1 and 2 into a Delta or an Iceberg target, exactly
once, as the ``spark_cdc_apply`` data source writer (``sink``, its batches applied by
``task``). ``engine/`` resolves and orders every batch whatever the format; ``delta/`` and
``iceberg/`` are the two target formats beneath it, each providing the engine's
``formats.TableFormat``."""
