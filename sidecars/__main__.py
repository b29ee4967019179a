import sys

from sidecars.entry import main

sys.exit(main())
