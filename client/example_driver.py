"""`python -m client.example_driver`: the example render driver against a simulated provider,
which lives in client/driver/example.py (`python -m client.driver.example` runs the same);
this short name is the one docs/driver-guide.md and the tests use."""

from __future__ import annotations

import sys

from client.driver.example import main

if __name__ == "__main__":
    sys.exit(main())
