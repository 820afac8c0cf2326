"""Render the lifecycle table as a Mermaid state diagram inside ``docs/harness.md``.

The diagram is drawn from ``agentloop._state.TRANSITIONS`` (the one table the
engine itself uses), never by hand, in the spirit of h11's
``docs/source/make-state-diagrams.py``. It lives in the page between the marker
comments ``<!-- state-diagram:start -->`` and ``<!-- state-diagram:end -->``.

Usage::

    python docs/make_state_diagram.py           # rewrite the diagram in docs/harness.md
    python docs/make_state_diagram.py --check   # exit 1 if the committed one is stale

``tests/test_docs.py`` runs the ``--check`` mode, so a change to the table that is
not re-rendered into the docs fails the test suite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentloop._state import TRANSITIONS, Input, State

START_MARKER = "<!-- state-diagram:start -->"
END_MARKER = "<!-- state-diagram:end -->"
DEFAULT_PAGE = Path(__file__).resolve().parent / "harness.md"


def render() -> str:
    """The Mermaid block for :data:`TRANSITIONS` (fenced, ending with a newline).

    Inputs that link the same two states share one arrow, their names joined by
    ``" / "``. Arrows are ordered by source state, then target state, in enum order,
    so the output only changes when the table does.
    """
    state_order = {state: index for index, state in enumerate(State)}
    input_order = {event: index for index, event in enumerate(Input)}
    edges: dict[tuple[State, State], list[Input]] = {}
    for (source, event), target in TRANSITIONS.items():
        edges.setdefault((source, target), []).append(event)
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {State.IDLE.name}"]
    for source, target in sorted(
        edges, key=lambda pair: (state_order[pair[0]], state_order[pair[1]])
    ):
        events = sorted(edges[source, target], key=input_order.__getitem__)
        label = " / ".join(event.value for event in events)
        lines.append(f"    {source.name} --> {target.name}: {label}")
    lines.append(f"    {State.DONE.name} --> [*]")
    lines.append("```")
    return "\n".join(lines) + "\n"


def splice(page: str, block: str) -> str:
    """Return ``page`` with the text between the markers replaced by ``block``.

    Raises:
        ValueError: the markers are missing, repeated or out of order.
    """
    if page.count(START_MARKER) != 1 or page.count(END_MARKER) != 1:
        raise ValueError(f"expected exactly one {START_MARKER!r} and one {END_MARKER!r}")
    head, rest = page.split(START_MARKER)
    if END_MARKER not in rest:
        raise ValueError(f"{END_MARKER!r} comes before {START_MARKER!r}")
    _, tail = rest.split(END_MARKER)
    return f"{head}{START_MARKER}\n{block}{END_MARKER}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Run the script; return the exit status (0 ok, 1 stale diagram with ``--check``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="don't write; exit 1 if the committed diagram differs from the table",
    )
    parser.add_argument(
        "--page", type=Path, default=DEFAULT_PAGE, help="the Markdown page (docs/harness.md)"
    )
    options = parser.parse_args(argv)
    page_path: Path = options.page
    page = page_path.read_text(encoding="utf-8")
    try:
        updated = splice(page, render())
    except ValueError as exc:
        print(f"{page_path}: {exc}", file=sys.stderr)
        return 1
    if options.check:
        if updated != page:
            print(
                f"{page_path}: the state diagram is out of date with agentloop._state.TRANSITIONS;"
                " run: python docs/make_state_diagram.py",
                file=sys.stderr,
            )
            return 1
        return 0
    if updated != page:
        page_path.write_text(updated, encoding="utf-8")
        print(f"{page_path}: state diagram updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
