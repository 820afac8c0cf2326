"""``ScriptedModel``: a deterministic model for tests, demos and benchmarks.

It answers each :class:`~agentloop.ModelRequest` with the next scripted response,
streamed the way a real provider streams: each text block as a few deltas, each
tool call or thinking block as one chunk, then the final
:class:`~agentloop.ModelResponse`. No randomness, no clock: the same script and the
same tools give the same event log every time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import TypeVar

import msgspec

from ._limits import MAX_CHUNKS_PER_STEP
from ._messages import AssistantMessage, Block, Message, TextBlock, ToolCall
from ._protocol import ModelChunk, ModelRequest, ModelResponse, Usage

__all__ = ["ScriptedModel", "ScriptedResponse"]

_Item = TypeVar("_Item")

#: Most pieces one text block is streamed in.
_TEXT_PIECES = 3


class ScriptedResponse(msgspec.Struct, frozen=True):
    """One scripted answer: what the model "says" for one request.

    Nothing is validated here on purpose: a script may hold a response the loop
    must reject (a bad stop reason, too many blocks), to test that it does.
    The request id is filled in from the request when the response is streamed.

    Attributes:
        id: the response id (the assistant message becomes ``message-<id>``).
        content: the blocks of the assistant message.
        stop_reason: ``stop``, ``tool_call``, ``length`` or ``error``.
        usage: token usage to report, if any.
    """

    id: str
    content: tuple[Block, ...]
    stop_reason: str
    usage: Usage | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.content, tuple):
            msgspec.structs.force_setattr(self, "content", tuple(self.content))

    @classmethod
    def text(cls, id: str, text: str, usage: Usage | None = None) -> ScriptedResponse:
        """A final answer: one text block, stop reason ``stop``."""
        return cls(id, (TextBlock(text),), "stop", usage)

    @classmethod
    def tool_calls(
        cls, id: str, *calls: ToolCall, text: str | None = None, usage: Usage | None = None
    ) -> ScriptedResponse:
        """Ask for ``calls`` (stop reason ``tool_call``), optionally after some ``text``."""
        content: tuple[Block, ...] = calls if text is None else (TextBlock(text), *calls)
        return cls(id, content, "tool_call", usage)


class ScriptedModel:
    """A :class:`~agentloop.Model` that replays a fixed list of responses, in order.

    A resumed session picks up where its script left off: when the first request a
    script receives carries a transcript that already holds the assistant messages
    its first responses became (the same ``message-<id>`` and content: a session
    continued by a new process, ``run_durable`` after a crash or
    ``replay.resume``), those responses are skipped (:attr:`skipped`) and the
    first one the transcript does not hold answers it. (A ``before_plan`` hook that
    drops them from the request hides them; use a
    :class:`~agentloop.FunctionModel` that answers from ``request.step`` then.)

    Attributes:
        requests: every request received, in order.
        call_count: how many times :meth:`stream` was called.
        skipped: how many responses the first request's transcript already held.

    Example::

        model = ScriptedModel([
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"left": 1, "right": 2})),
            ScriptedResponse.text("r2", "1 + 2 = 3"),
        ])
        result = run([UserMessage("u1", "1 + 2?")], model=model, tools=[add])
        model.assert_complete()
    """

    def __init__(self, responses: Sequence[ScriptedResponse]) -> None:
        """Script the model.

        Args:
            responses: the answers, one per model request, used in order.

        Raises:
            TypeError: an item is not a :class:`ScriptedResponse`.
        """
        for index, response in enumerate(responses):
            if type(response) is not ScriptedResponse:
                raise TypeError(f"responses[{index}]: expected ScriptedResponse, got {response!r}")
        self._responses = tuple(responses)
        self._next = 0
        self.requests: list[ModelRequest] = []
        self.call_count = 0
        self.skipped = 0

    @property
    def remaining(self) -> int:
        """How many scripted responses have not been used yet."""
        return len(self._responses) - self._next

    def stream(self, request: ModelRequest) -> Iterator[ModelChunk | ModelResponse]:
        """Record ``request`` and stream the next scripted response for it.

        The request is recorded and the response taken when this is called (not
        lazily), so ``requests``/``call_count`` are right even if the stream is
        never consumed.

        Raises:
            AssertionError: the script has no response left. :func:`agentloop.run`
                turns this into a failed run (``MODEL_ERROR``) carrying the message.
        """
        self.requests.append(request)
        self.call_count += 1
        if self.call_count == 1:
            self._next = self.skipped = _given(self._responses, request.messages)
        if self._next >= len(self._responses):
            raise AssertionError(
                f"ScriptedModel: no scripted response left for {request.id} "
                f"(all {len(self._responses)} were used)"
            )
        response = self._responses[self._next]
        self._next += 1
        items: list[ModelChunk | ModelResponse] = [
            ModelChunk(request.id, block) for block in _stream_blocks(response.content)
        ]
        items.append(
            ModelResponse(
                request.id, response.id, response.content, response.stop_reason, response.usage
            )
        )
        return iter(items)

    def astream(self, request: ModelRequest) -> AsyncIterator[ModelChunk | ModelResponse]:
        """:meth:`stream` for the asyncio drivers (:func:`agentloop.arun`): the same
        items, as an async iterator (the request is recorded at once, as there)."""
        return _async_items(self.stream(request))

    def assert_complete(self) -> None:
        """Check that every scripted response was used.

        Raises:
            AssertionError: saying how many were not, and the next unused id.
        """
        if self.remaining:
            unused = self._responses[self._next]
            raise AssertionError(
                f"ScriptedModel: {self.remaining} of {len(self._responses)} scripted "
                f"responses were not used (next: {unused.id!r})"
            )

    def __repr__(self) -> str:
        return f"<ScriptedModel {self._next}/{len(self._responses)} used>"


def _given(responses: Sequence[ScriptedResponse], messages: Sequence[Message]) -> int:
    """How many of the first ``responses`` the transcript holds already, each as the
    assistant message it became (a resumed session's earlier process gave them)."""
    held = {
        message.id: message.content for message in messages if type(message) is AssistantMessage
    }
    given = 0
    for response in responses:
        if held.get(f"message-{response.id}") != response.content:
            break
        given += 1
    return given


async def _async_items(items: Iterable[_Item]) -> AsyncIterator[_Item]:
    """``items`` as an async iterator (what the models here stream is already known)."""
    for item in items:
        yield item


def _stream_blocks(content: tuple[Block, ...]) -> list[Block]:
    """The blocks to stream for ``content``: text split into up to three deltas.

    Text is split only while the total stays within ``MAX_CHUNKS_PER_STEP``; if
    even one chunk per block would exceed it, nothing is streamed and the loop
    judges the final response alone.
    """
    if len(content) > MAX_CHUNKS_PER_STEP:
        return []
    pieces = _TEXT_PIECES if len(content) * _TEXT_PIECES <= MAX_CHUNKS_PER_STEP else 1
    out: list[Block] = []
    for block in content:
        if type(block) is TextBlock and pieces > 1 and len(block.text) > 1:
            out.extend([TextBlock(part) for part in _split(block.text, pieces)])
        else:
            out.append(block)
    return out


def _split(text: str, pieces: int) -> list[str]:
    """Split ``text`` into at most ``pieces`` non-empty parts of nearly equal length."""
    pieces = min(pieces, len(text))
    size, extra = divmod(len(text), pieces)
    parts = []
    start = 0
    for index in range(pieces):
        end = start + size + (1 if index < extra else 0)
        parts.append(text[start:end])
        start = end
    return parts
