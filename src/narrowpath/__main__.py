import sys

from narrowpath.cli.main import main

sys.exit(main())
