"""Pure plan rewriting: a change-feed DataFrame in, a post-processed DataFrame out.

Nothing here imports the client layer above it. Importing ``spark_cdc.rewrite`` runs the
package's ``spark_cdc/__init__`` first, which arranges the stream-start guard, so a stream
holding a rewrite is guarded however it was built.
"""

from spark_cdc.rewrite.options import CdcOptions, DeduplicationMode, parse_options
from spark_cdc.rewrite.post_process import post_process
from spark_cdc.rewrite.spec import ChangelogSpec

__all__ = ["CdcOptions", "ChangelogSpec", "DeduplicationMode", "parse_options", "post_process"]
