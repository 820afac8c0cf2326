"""docs/durable.md stays true: its numbers are the benchmark's. (Every ```` ```python ````
block runs on its own, and prints what its comments say, in tests/test_docs_blocks.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "durable.md"


def test_the_numbers_are_the_bench_s_labels():
    numbers = re.search(
        r"<!-- numbers: bench/durable.py -->\n(.*?)<!-- end numbers -->", PAGE.read_text(), re.S
    )
    assert numbers is not None
    assert "commits" in numbers.group(1) and "sessions/s" in numbers.group(1)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
