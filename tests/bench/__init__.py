"""Benchmarks: ``make bench`` (or ``./dev bench``) runs them and writes JSON plus a chart."""
