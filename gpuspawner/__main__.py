"""``python -m gpuspawner``: the ``gpuspawner`` command."""

import sys

from gpuspawner.cli import main

sys.exit(main())
