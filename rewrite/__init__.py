"""Pure plan rewriting: a change-feed DataFrame in, a post-processed DataFrame out.

Importing this package first imports ``client``, which installs the output-mode guard, so
a stream holding a rewrite can never start in Update/Complete mode whichever package a user
imports first. ``client`` imports this package's modules (never its names), so the order is safe.
"""

import client  # noqa: F401  (installs the output-mode guard)
from rewrite.options import CdcOptions, DeduplicationMode, parse_options
from rewrite.post_process import post_process
from rewrite.spec import ChangelogSpec

__all__ = ["CdcOptions", "ChangelogSpec", "DeduplicationMode", "parse_options", "post_process"]
