"""Pure plan rewriting: a change-feed DataFrame in, a post-processed DataFrame out.

Importing this package also installs the client's output-mode guard (through
``client.errors``), so streams holding a rewrite can never start in Update/Complete mode.
"""

from rewrite.options import CdcOptions, DeduplicationMode, parse_options
from rewrite.post_process import post_process
from rewrite.spec import ChangelogSpec

__all__ = ["CdcOptions", "ChangelogSpec", "DeduplicationMode", "parse_options", "post_process"]
