import sys

from gpuspawner.cli import main

sys.exit(main())
