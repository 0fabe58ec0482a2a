"""An Iceberg target and its state for the apply engine (``format``): tables in a pyiceberg
catalog."""
