"""``apply_changes``' engine: SCD type 1 and 2 into Delta targets, exactly once, as the
``spark_cdc_apply`` data source writer (``sink``); the per-key state (``state``), the
batch's rules (``batch``, ``history``) and the target's commits (``tables``)."""
