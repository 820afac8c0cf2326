"""The architecture as data, checked (DESIGN §24): floors, no import circles, one
internal interface, one error root.

The import graph is read with ``ast`` from the source of every module of
``agentloop/`` and ``replay/``: module-level imports and imports inside functions
(an import deferred to first use is still a dependency) and imports under
``if TYPE_CHECKING:`` (never executed, but naming a type from a module is still a
dependency on it: the old ``_batch.py`` <-> ``_driver.py`` circle was one).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import agentloop
import replay
from agentloop import AgentLoopError

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agentloop", "replay")

#: The floors, lowest first: a module may import modules of its own floor or of a
#: lower one, never of a higher one. A module's floor is that of the longest prefix
#: here naming it (the package itself, or a dotted prefix of its name). This table
#: is the one written in docs/design.md §24.
FLOORS: dict[str, int] = {
    # 0, the core: the engine, the drivers, the log, the codec, ScriptedModel...
    # (every agentloop._* module and the package's __init__), and agentloop._spi.
    "agentloop": 0,
    # 1, adapters and extras over the core: provider adapters, OpenTelemetry, MCP,
    # the Temporal driver. They import the core, never replay.
    "agentloop.models": 1,
    "agentloop.otel": 1,
    "agentloop.mcp": 1,
    "agentloop.temporal": 1,
    # 2, replay: logs, replay, the store, durable runs, viewer, pytest plugin.
    "replay": 2,
    # 3, what is built on replay: the CLIs and the evaluations.
    "agentloop.__main__": 3,
    "agentloop.evals": 3,
    "replay.__main__": 3,
}

#: Who may import private agentloop modules, and which: replay and the Temporal
#: driver go through the one declared internal interface.
SPI = "agentloop._spi"
SPI_USERS = ("replay", "agentloop.temporal")


def module_files() -> dict[str, Path]:
    """Every module of the library: dotted name -> source file."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = module_files()


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, typing_only: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        yield child, typing_only
        inner = typing_only or (isinstance(child, ast.If) and _type_checking(child))
        if isinstance(child, ast.If) and _type_checking(child):
            for part in child.body:  # the else branch runs at run time
                yield part, True
                yield from _walk(part, True)
            for part in child.orelse:
                yield part, typing_only
                yield from _walk(part, typing_only)
        else:
            yield from _walk(child, inner)


def imports(module: str) -> set[tuple[str, bool]]:
    """The library modules ``module`` imports, each with whether only for typing."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[tuple[str, bool]] = set()
    for node, typing_only in _walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in MODULES else base)
        for target in targets:
            while target and target not in MODULES:  # `import a.b.c` names a.b.c
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add((target, typing_only))
    return found


GRAPH = {module: imports(module) for module in MODULES}


def floor(module: str) -> int:
    prefixes = [p for p in FLOORS if module == p or module.startswith(p + ".")]
    return FLOORS[max(prefixes, key=len)]


# --------------------------------------------------------------------------- floors and circles


def test_the_graph_is_read() -> None:
    # Guards the reader itself: known edges of each kind are found.
    assert ("agentloop._signals", False) in GRAPH["agentloop._driver"]
    assert ("agentloop._batch", False) in GRAPH["agentloop._driver"]  # inside a function
    assert ("agentloop._protocol", True) in GRAPH["agentloop._errors"]  # TYPE_CHECKING
    assert ("agentloop", False) in GRAPH["replay._log"]
    assert ("agentloop._spi", False) in GRAPH["replay._log"]
    assert ("replay", False) in GRAPH["agentloop.__main__"]
    assert ("agentloop.otel", False) in GRAPH["replay._otel"]  # deferred
    assert {floor(m) for m in MODULES} == {0, 1, 2, 3}


def test_no_import_goes_up_a_floor() -> None:
    upward = [
        f"{module} (floor {floor(module)}) imports {target} (floor {floor(target)})"
        + (" for typing" if typing_only else "")
        for module, targets in GRAPH.items()
        for target, typing_only in sorted(targets)
        if floor(target) > floor(module)
    ]
    assert upward == []


def test_no_import_circles() -> None:
    edges = {module: {target for target, _ in targets} for module, targets in GRAPH.items()}
    # Tarjan's strongly connected components: any component of more than one
    # module is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    assert circles == []


def test_the_floors_table_is_the_one_in_the_design() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = design.split("## 24.", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d) \| `([\w.]+)`", section, re.MULTILINE)
    assert {prefix: int(number) for number, prefix in rows} == FLOORS


# --------------------------------------------------------------------------- one internal interface


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def test_replay_and_temporal_use_only_the_declared_internal_interface() -> None:
    offending = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if any(module == user or module.startswith(user + ".") for user in SPI_USERS)
        for target, _ in sorted(targets)
        if target.startswith("agentloop.")
        and _private(target)
        and target != SPI
        and not target.startswith("agentloop.temporal")  # its own modules
    ]
    assert offending == []


def test_the_internal_interface_is_used_and_lists_what_it_exports() -> None:
    spi = importlib.import_module(SPI)
    used: set[str] = set()
    for module in MODULES:
        if any(module == user or module.startswith(user + ".") for user in SPI_USERS):
            tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == SPI:
                    used.update(alias.name for alias in node.names)
    assert used == set(spi.__all__)  # nothing exported that nobody needs
    for name in spi.__all__:
        assert name in (spi.__doc__ or ""), f"{name} is not described in {SPI}'s docstring"


# --------------------------------------------------------------------------- one error root


def library_modules() -> list[ModuleType]:
    """Every module of agentloop and replay, optional extras included (all are
    installed for the test suite)."""
    found = []
    for package in (agentloop, replay):
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            found.append(importlib.import_module(info.name))
    return found


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class the library defines: ``module.Name`` -> class."""
    found = {}
    for module in library_modules():
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


EXCEPTIONS = exception_classes()
# Control flow inside one module, never seen outside it (two are BaseException on
# purpose, to pass through a caller's `except Exception`): private by name.
PRIVATE = {name for name in EXCEPTIONS if name.rpartition(".")[2].startswith("_")}


def test_every_exception_class_derives_from_the_root() -> None:
    assert len(EXCEPTIONS) - len(PRIVATE) >= 20  # the walk found them
    outside = [
        name
        for name in sorted(set(EXCEPTIONS) - PRIVATE)
        if not issubclass(EXCEPTIONS[name], AgentLoopError)
    ]
    assert outside == []


def test_private_exceptions_stay_private() -> None:
    private = {EXCEPTIONS[name] for name in PRIVATE}
    for module in library_modules():
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            assert not (inspect.isclass(value) and value in private), name


def documented_tree() -> list[tuple[int, type[BaseException]]]:
    """The exception tree of docs/protocol.md: (column of the name, class) per entry."""
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    block = text.split("### The exception tree", 1)[1].split("```\n", 2)[1]
    tree = []
    for line in block.splitlines():
        match = re.match(r"^([│├└─ ]*)([A-Za-z_][\w.]*)", line)
        if match is None or (not match.group(2)[0].isupper() and "." not in match.group(2)):
            continue
        dotted = match.group(2)
        if not dotted.startswith("replay."):
            dotted = f"agentloop.{dotted}"
        module, _, name = dotted.rpartition(".")
        tree.append((len(match.group(1)), getattr(importlib.import_module(module), name)))
    return tree


def test_the_documented_tree_is_the_code_s() -> None:
    tree = documented_tree()
    assert tree[0] == (0, AgentLoopError)
    documented = [cls for _, cls in tree]
    assert len(documented) == len(set(documented))
    assert set(documented) == {EXCEPTIONS[name] for name in set(EXCEPTIONS) - PRIVATE}
    for at, (column, cls) in enumerate(tree[1:], 1):
        parent = next(c for col, c in reversed(tree[:at]) if col < column)
        assert cls.__bases__[0] is parent, f"{cls.__name__} is drawn under {parent.__name__}"


def test_the_classes_keep_their_old_bases() -> None:
    # Existing `except ValueError` / `except KeyError` / `except RuntimeError`
    # clauses keep catching what they caught, and nothing more.
    also = {
        "agentloop._state.IllegalTransition": RuntimeError,
        "agentloop.models._cli.ModelSpecError": ValueError,
        "replay._store.SessionNotFound": KeyError,
    }
    for name in sorted(set(EXCEPTIONS) - PRIVATE):
        cls = EXCEPTIONS[name]
        if name in also:
            assert issubclass(cls, also[name]), name
        else:
            assert not issubclass(cls, (ValueError, KeyError, RuntimeError, TypeError)), name


def test_hook_abort_is_still_caught_by_the_engine() -> None:
    # A user's hook raises it; under the root it still aborts the run as before.
    from agentloop import HookAbort, HookRegistry, ScriptedModel, ScriptedResponse, UserMessage

    def abort(payload: object) -> None:
        raise HookAbort("no")

    result = agentloop.run(
        [UserMessage("u1", "hi")],
        model=ScriptedModel([ScriptedResponse.text("r1", "hello")]),
        tools=[],
        hooks=HookRegistry({"before_step": abort}),
    )
    assert (result.status, result.error and result.error.code) == ("failed", "HOOK_ABORT")
