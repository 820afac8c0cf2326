#!/usr/bin/env python3
"""Check the built wheel and sdist hold what they should (run from a git checkout).

    python -m build -o dist . && python scripts/check_dist.py dist

- The wheel holds exactly the git-tracked files of ``agentloop/`` and ``replay/``
  (``py.typed`` included), a license, the console scripts and the pytest plugin,
  and metadata naming this distribution at the version in ``agentloop/_version.py``.
- The sdist holds exactly the git-tracked files (so its test suite runs), plus
  ``PKG-INFO``.

Exits 1 with one line per problem.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath

DISTRIBUTION = "agentloop-replay"
PACKAGES = ("agentloop", "replay")
ROOT = Path(__file__).resolve().parent.parent
ENTRY_POINTS = {
    "console_scripts": {
        "agentloop": "agentloop.__main__:main",
        "agentloop-replay": "replay.__main__:main",
    },
    "pytest11": {"agentloop": "replay.pytest_plugin"},
}


def tracked() -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return {name for name in listed.split("\0") if name}


def version() -> str:
    text = (ROOT / "agentloop" / "_version.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    assert found is not None, "agentloop/_version.py has no __version__"
    return found[1]


def entry_points(text: str) -> dict[str, dict[str, str]]:
    groups: dict[str, dict[str, str]] = {}
    group = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1]
            groups[group] = {}
        elif "=" in line:
            name, value = (part.strip() for part in line.split("=", 1))
            groups[group][name] = value
    return groups


def check_wheel(path: Path, files: set[str], problems: list[str]) -> None:
    dist_info = f"{DISTRIBUTION.replace('-', '_')}-{version()}.dist-info"
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        code = {n for n in names if not n.startswith(f"{dist_info}/")}
        expected = {f for f in files if PurePosixPath(f).parts[0] in PACKAGES}
        for name in sorted(expected - code):
            problems.append(f"{path.name}: missing {name}")
        for name in sorted(code - expected):
            problems.append(f"{path.name}: holds {name}, which is not a tracked package file")
        absent = [
            f"{dist_info}/{required}"
            for required in ("METADATA", "WHEEL", "RECORD", "entry_points.txt", "licenses/LICENSE")
            if f"{dist_info}/{required}" not in names
        ]
        if absent:
            problems.append(f"{path.name}: no {', '.join(absent)}")
            return
        metadata = HeaderParser().parsestr(wheel.read(f"{dist_info}/METADATA").decode())
        found = entry_points(wheel.read(f"{dist_info}/entry_points.txt").decode())
    if metadata["Name"] != DISTRIBUTION or metadata["Version"] != version():
        problems.append(f"{path.name}: metadata names {metadata['Name']} {metadata['Version']}")
    if metadata["License-Expression"] != "MIT":
        problems.append(f"{path.name}: License-Expression is {metadata['License-Expression']!r}")
    if "Typing :: Typed" not in metadata.get_all("Classifier", []):
        problems.append(f"{path.name}: not classified Typing :: Typed")
    if metadata.get_content_type() == "text/plain" and not metadata.get_payload():
        problems.append(f"{path.name}: no long description")
    for group, expected_entries in ENTRY_POINTS.items():
        if found.get(group) != expected_entries:
            problems.append(f"{path.name}: entry points [{group}] are {found.get(group)}")


def check_sdist(path: Path, files: set[str], problems: list[str]) -> None:
    top = f"{DISTRIBUTION.replace('-', '_')}-{version()}"
    with tarfile.open(path) as sdist:
        names = {m.name for m in sdist.getmembers() if m.isfile()}
    outside = sorted(n for n in names if not n.startswith(f"{top}/"))
    if outside:
        problems.append(f"{path.name}: files outside {top}/: {outside[:3]}")
    held = {n.removeprefix(f"{top}/") for n in names} - {"PKG-INFO"}
    for name in sorted(files - held):
        problems.append(f"{path.name}: missing {name}")
    for name in sorted(held - files):
        problems.append(f"{path.name}: holds {name}, which git does not track")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[0])
    wheels = sorted(folder.glob("*.whl"))
    sdists = sorted(folder.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"{folder}: expected one wheel and one sdist, found {wheels + sdists}")
        return 1
    files = tracked()
    problems: list[str] = []
    check_wheel(wheels[0], files, problems)
    check_sdist(sdists[0], files, problems)
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{wheels[0].name} and {sdists[0].name}: contents and metadata as expected")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
