#!/usr/bin/env python3
"""Print ``name==version`` pins of the lowest versions the given extras allow.

Reads the installed distribution's metadata (so run it with the Python of the venv
the project is installed in); every requirement of each extra must have a ``>=``
lower bound. CI installs the pins and runs the tests that use them, so the bounds
in pyproject.toml stay true::

    python -m pip install $(python scripts/lowest_pins.py openai anthropic)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.metadata import requires

from packaging.requirements import Requirement

DISTRIBUTION = "agentloop-replay"


def lowest_pins(extras: Sequence[str], declared: Sequence[str]) -> list[str]:
    """The pins for ``extras``, from the distribution's ``Requires-Dist`` lines."""
    pins: list[str] = []
    for extra in extras:
        found = False
        for line in declared:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or not marker.evaluate({"extra": extra}):
                continue
            if marker.evaluate({"extra": ""}):
                continue  # not specific to this extra (a base dependency)
            found = True
            floors = [s.version for s in requirement.specifier if s.operator == ">="]
            if len(floors) != 1:
                raise SystemExit(
                    f"{DISTRIBUTION}[{extra}]: {line!r} needs exactly one '>=' lower bound"
                )
            pins.append(f"{requirement.name}=={floors[0]}")
        if not found:
            raise SystemExit(f"{DISTRIBUTION} has no extra {extra!r}")
    return pins


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(lowest_pins(argv, requires(DISTRIBUTION) or [])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
