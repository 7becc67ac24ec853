"""`python -m client.cli`: the `lane` command."""

import sys

from client.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
