"""agentloop side by side with the agent frameworks users would otherwise pick.

``python -m bench.peers`` times agentloop (the raw generator and ``run()`` +
``ScriptedModel``); ``python -m bench.peers --peers`` adds pydantic-ai,
openai-agents and LangGraph (install them with ``pip install -e ".[bench]"``).
Each framework runs in its own fresh process over its own scripted test double,
no network; see ``bench/README.md`` and :mod:`bench.peers._harness`.
"""

from ._harness import (
    CORE,
    PEERS,
    Framework,
    Settings,
    add_arguments,
    collect,
    format_report,
    main,
    run_suite,
)

__all__ = [
    "CORE",
    "PEERS",
    "Framework",
    "Settings",
    "add_arguments",
    "collect",
    "format_report",
    "main",
    "run_suite",
]
