"""A Delta target and its state for the apply engine (``format``): tables at paths, written
by delta-rs and by this package's own commits."""
