"""Runs inside the Spark Connect server: the ``delta_changelog`` Python data source (and the
``cdc_sample_changelog`` stand-in the demo and tests use)."""
