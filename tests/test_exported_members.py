"""The public API is exactly what ``__all__`` lists (httpx tests/test_exported_members.py)."""

from __future__ import annotations

import agentloop
import replay


def test_agentloop_exports_what_it_lists() -> None:
    public = {name for name in dir(agentloop) if not name.startswith("_")}
    modules = {"models", "otel", "mcp", "temporal", "evals"}  # imported on demand
    assert set(agentloop.__all__) == (public - modules) | {"__version__"}
    for name in agentloop.__all__:
        assert hasattr(agentloop, name), name


def test_replay_exports_what_it_lists() -> None:
    public = {name for name in dir(replay) if not name.startswith("_")}
    assert set(replay.__all__) <= public
    for name in replay.__all__:
        assert hasattr(replay, name), name


def test_private_modules_declare_all() -> None:
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(agentloop.__path__):
        if info.name.startswith("_") and info.name != "__main__":
            module = importlib.import_module(f"agentloop.{info.name}")
            assert hasattr(module, "__all__"), info.name
