"""``python -m replay otel LOG``: a recorded log as OpenTelemetry spans (OTLP/JSON).

The translation is :func:`agentloop.otel.otlp_json` (the ``otel`` extra); this module
is only the command line around it, imported by ``replay.__main__`` without
importing OpenTelemetry until the command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentloop import AgentLoopError, Event

__all__ = ["DESCRIPTION", "OTelCommandError", "arguments", "command"]


class OTelCommandError(AgentLoopError):
    """The command cannot run (no OpenTelemetry, an unwritable output file)."""


def _name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


#: ``python -m replay otel --help``'s description.
DESCRIPTION = """\
Write the spans of a log (GenAI semantic conventions: invoke_agent, chat,
execute_tool) as one OTLP/JSON ExportTraceServiceRequest. Ids are derived from the
log: the same log gives the same output. Message content is left out unless
--capture-content.

With --endpoint URL the spans are sent to an OTLP/HTTP endpoint (protobuf) instead.

Exit codes: 0 written (or sent); 2 a usage error, a log that cannot be read, no
OpenTelemetry installed (the otel extra), an output that cannot be written, or an
endpoint that did not accept the spans."""


def arguments(otel: argparse.ArgumentParser) -> None:
    """Add ``otel``'s arguments to its subparser (``python -m replay otel``)."""
    otel.add_argument("log", help="the log file (or a session store, with --session ID)")
    otel.add_argument(
        "--session", metavar="ID", help="LOG is a session store: export this session of it"
    )
    where = otel.add_mutually_exclusive_group()
    where.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    where.add_argument(
        "--endpoint",
        metavar="URL",
        help=(
            "send the spans to this OTLP/HTTP endpoint instead (protobuf; a collector's "
            "http://HOST:4318/v1/traces; a URL without a path gets /v1/traces)"
        ),
    )
    otel.add_argument(
        "--capture-content",
        action="store_true",
        help="include messages, tool arguments and results (may hold user data)",
    )
    otel.add_argument("--agent-name", type=_name, help="gen_ai.agent.name (invoke_agent NAME)")
    otel.add_argument("--provider", type=_name, help="gen_ai.provider.name (default: unknown)")
    otel.add_argument("--model", type=_name, help="gen_ai.request.model (chat MODEL)")
    otel.add_argument("--conversation-id", type=_name, help="gen_ai.conversation.id")
    otel.add_argument(
        "--service-name", type=_name, default="agentloop", help="service.name (agentloop)"
    )
    otel.add_argument(
        "--no-tree",
        dest="tree",
        action="store_false",
        help="this session only (default: each child session's spans too, under the "
        "execute_tool span of the call that ran it, DESIGN §26)",
    )


def command(
    args: argparse.Namespace,
    events: Sequence[Event],
    children: Callable[[Sequence[Event], str], Sequence[Event] | None] | None = None,
) -> int:
    """Run ``otel`` on the events of ``args.log`` (and with ``children``, its
    session tree's: see ``agentloop.otel.record_log``); returns the exit code.

    Raises:
        OTelCommandError: OpenTelemetry is not installed, or the output cannot be
            written (one line for stderr).
    """
    try:
        from agentloop.otel import otlp_json, send_otlp
    except ImportError as exc:
        raise OTelCommandError(str(exc)) from None
    # What the spans say, the same whether they are sent or written.
    options: dict[str, Any] = {
        "service_name": args.service_name,
        "capture_content": args.capture_content,
        "agent_name": args.agent_name,
        "provider_name": args.provider,
        "request_model": args.model,
        "conversation_id": args.conversation_id,
        "children": children,
    }
    if args.endpoint is not None:
        try:
            sent = send_otlp(events, args.endpoint, **options)
        except ImportError as exc:  # the exporter: the otel extra, older than this
            raise OTelCommandError(
                f"{exc}: sending needs the OTLP/HTTP exporter: pip install 'agentloop-replay[otel]'"
            ) from None
        except ConnectionError as exc:
            raise OTelCommandError(str(exc)) from None
        print(f"sent {sent} spans to {args.endpoint}")
        return 0
    text = otlp_json(events, **options)
    if args.output is None:
        sys.stdout.write(text + "\n")
        return 0
    try:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OTelCommandError(f"{args.output}: cannot write: {reason}") from None
    return 0
