"""``python -m bench.peers [--peers] [--quick] [--goals] [--no-memory] [--json FILE]``."""

from __future__ import annotations

import sys

from ._harness import main

if __name__ == "__main__":
    sys.exit(main())
