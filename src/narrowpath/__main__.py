import sys

from narrowpath.cli.main import main

if __name__ == "__main__":  # `python -m narrowpath`; the guard keeps spawned worker processes (sweep) from re-running it
    sys.exit(main())
