"""``python -m client`` is ``spark-cdc``."""

import sys

from client.cli import main

sys.exit(main())
