import sys

from sidecars.cli import main

sys.exit(main())
