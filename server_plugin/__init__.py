"""Runs inside the Spark Connect server: the Delta changelog data source (to come)."""
