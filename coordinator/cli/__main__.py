"""``python -m coordinator.cli``: the ``queue-coordinator`` command."""

import sys

from coordinator.cli.main import main

sys.exit(main())
