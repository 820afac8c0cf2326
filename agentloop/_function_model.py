"""``FunctionModel``: a test model whose answers are computed from each request.

:class:`~agentloop.ScriptedModel` answers from a fixed list, whatever it is
sent. When the answer should depend on what the model is sent (the transcript,
the tool results so far, the system prompt, the tools offered), write a function
from :class:`~agentloop.ModelRequest` to a response and wrap it::

    def model_fn(request: ModelRequest) -> ScriptedResponse:
        last = request.messages[-1]
        if type(last) is ToolResultMessage:
            return ScriptedResponse.text("r2", f"The answer is {last.content}.")
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"left": 1, "right": 2}))

    model = FunctionModel(model_fn)

The response is streamed exactly as :class:`~agentloop.ScriptedModel` streams
one: each text block as a few deltas, other blocks as one chunk each.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from ._protocol import ModelChunk, ModelFailure, ModelRequest, ModelResponse
from ._scripted import ScriptedModel, ScriptedResponse

__all__ = ["FunctionModel"]


class FunctionModel:
    """A :class:`~agentloop.Model` that calls ``fn(request)`` for every request.

    ``fn`` returns one of:

    - a :class:`~agentloop.ScriptedResponse` (or any object with ``id``,
      ``content``, ``stop_reason`` and optionally ``usage`` attributes);
    - a :class:`~agentloop.ModelResponse` (its ``request_id`` and ``at`` are
      replaced by the request's id and the driver's clock);
    - a :class:`~agentloop.ModelFailure`: the model call fails (sent as is,
      ``request_id`` filled in);
    - a ``str``: a final text answer (stop reason ``stop``) with the response
      id ``function-<request id>-<n>``, ``n`` the number of messages the request
      carried (unique within a run, and across runs that continue a transcript).

    An exception raised by ``fn`` propagates out of :meth:`stream`, so
    :func:`agentloop.run` ends the run ``failed`` (``MODEL_ERROR``) with its message.

    Attributes:
        fn: the function.
        requests: every request received, in order.
        call_count: how many times :meth:`stream` was called.

    >>> from agentloop import UserMessage, run
    >>> model = FunctionModel(lambda request: f"You said: {request.messages[-1].content}")
    >>> run([UserMessage("u1", "hello")], model=model, tools=[]).final_text
    'You said: hello'
    >>> model.call_count
    1
    """

    def __init__(self, fn: Callable[[ModelRequest], Any]) -> None:
        """Wrap ``fn`` (a plain function, or an ``async def`` for the asyncio drivers).

        Raises:
            TypeError: ``fn`` is not callable.
        """
        if not callable(fn):
            raise TypeError(f"FunctionModel needs a function of the request, got {fn!r}")
        self.fn = fn
        self.requests: list[ModelRequest] = []
        self.call_count = 0
        #: ``True`` when ``fn`` is an ``async def``: only ``arun``/``adrive`` can
        #: await it (``run`` refuses the model); ``None``: either driver.
        self.asynchronous: bool | None = True if inspect.iscoroutinefunction(fn) else None

    def stream(self, request: ModelRequest) -> Iterator[ModelChunk | ModelResponse | ModelFailure]:
        """Record ``request``, call ``fn`` and stream its answer.

        ``fn`` is called here, not lazily when the stream is consumed.

        Raises:
            TypeError: ``fn`` returned something that is none of the accepted kinds,
                or is an ``async def`` (use :meth:`astream`, as ``arun`` does).
            Exception: whatever ``fn`` raises.
        """
        if self.asynchronous:
            raise TypeError(
                f"FunctionModel: {self._name()} is an async function; drive this model "
                "with agentloop.arun/adrive (astream), or pass a plain function"
            )
        self.requests.append(request)
        self.call_count += 1
        return self._items(request, self.fn(request))

    async def astream(
        self, request: ModelRequest
    ) -> AsyncIterator[ModelChunk | ModelResponse | ModelFailure]:
        """:meth:`stream` for the asyncio drivers; ``fn`` may be an ``async def``."""
        self.requests.append(request)
        self.call_count += 1
        answer = self.fn(request)
        if inspect.isawaitable(answer):
            answer = await answer
        for item in self._items(request, answer):
            yield item

    def _items(
        self, request: ModelRequest, answer: Any
    ) -> Iterator[ModelChunk | ModelResponse | ModelFailure]:
        kind = type(answer)
        if kind is ModelFailure:
            return iter((ModelFailure(request.id, answer.message, answer.code),))
        if kind is str:
            scripted = ScriptedResponse.text(
                f"function-{request.id}-{len(request.messages)}", answer
            )
        elif kind is ScriptedResponse:
            scripted = answer
        elif kind is ModelResponse or _looks_like_response(answer):
            scripted = ScriptedResponse(
                answer.id,
                tuple(answer.content),
                answer.stop_reason,
                getattr(answer, "usage", None),
            )
        else:
            raise TypeError(
                "FunctionModel: the function must return a ScriptedResponse, a "
                f"ModelResponse, a ModelFailure or a str, got {answer!r}"
            )
        return ScriptedModel([scripted]).stream(request)

    def _name(self) -> str:
        return getattr(self.fn, "__qualname__", None) or repr(self.fn)

    def __repr__(self) -> str:
        return f"<FunctionModel {self._name()} called {self.call_count}x>"


def _looks_like_response(answer: object) -> bool:
    return all(hasattr(answer, name) for name in ("id", "content", "stop_reason"))
