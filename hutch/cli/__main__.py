"""`python -m hutch.cli`: the `hutch` command without its installed script."""

import sys

from hutch.cli import main

if __name__ == "__main__":
    sys.exit(main())
