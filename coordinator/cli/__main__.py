"""``python -m coordinator.cli``: the ``queue-coordinator`` command."""

import sys

from coordinator.cli.main import main

# Guarded: a serve process (coordinator.cli.processes) starts by importing this module again.
if __name__ == "__main__":
    sys.exit(main())
