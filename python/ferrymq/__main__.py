"""``python -m ferrymq``: the command line (see :mod:`ferrymq._cli`)."""

from __future__ import annotations

import sys

from ferrymq._cli import main

if __name__ == "__main__":
    sys.exit(main())
