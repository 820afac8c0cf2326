"""``FallbackModel``: try the next model when one fails before its first chunk.

Theory of operation
-------------------
A model call that fails *before* it produced anything can be sent to another model
without the loop noticing: nothing was streamed that would have to be taken back.
:class:`FallbackModel` asks its models in order and streams the first one that
starts answering. A failure after the first chunk is raised as it is (the loop
already recorded those chunks), and so is anything that is not a
:class:`~agentloop.ModelError` (a bug is not a reason to switch models).

Every model that failed is written down as a :class:`~agentloop.ModelAttempt` in the
``attempts`` of the reply that ends the request: the ``ModelResponse`` (or the
adapter's ``ModelFailure``) of the model that answered, or the ``ModelFailure``
:func:`agentloop.run` records when every model failed. The log therefore holds every
attempt, replays byte for byte, and the tokens a failed attempt had already been
billed for still count in ``RunResult.usage``. Each fallback is also logged as a
WARNING on the ``agentloop.models`` logger.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgspec

from .._driver import Model, model_method
from .._errors import ModelError
from .._protocol import ModelAttempt, ModelFailure, ModelRequest, ModelResponse, Usage
from ._common import ModelReply, logger

__all__ = ["FallbackModel"]


class FallbackModel:
    """Answer with ``primary``; when it fails before its first chunk, with the next.

    The models are all of one kind: sync ones for ``run``/``drive``
    (:meth:`stream`), or async ones -- adapters given the SDK's async client --
    for ``arun``/``adrive`` (:meth:`astream`); models that serve both
    (``ScriptedModel``, ``FunctionModel``) go with either.

    Args:
        primary: the model to ask first.
        *fallbacks: the models to ask next, in order (at least one).

    Raises:
        TypeError: a model with neither ``stream(request)`` nor ``astream(request)``,
            no fallback, or sync and async models mixed.

    >>> from agentloop import ScriptedModel, ScriptedResponse, TextBlock
    >>> backup = ScriptedModel([ScriptedResponse("r1", (TextBlock("hi"),), "stop")])
    >>> FallbackModel(backup, ScriptedModel([]))  # doctest: +ELLIPSIS
    FallbackModel(ScriptedModel(...), ScriptedModel(...))
    """

    def __init__(self, primary: Model, *fallbacks: Any) -> None:
        if not fallbacks:
            raise TypeError("FallbackModel needs at least one fallback model after the primary")
        models = (primary, *fallbacks)
        for index, model in enumerate(models):
            if not any(callable(getattr(model, name, None)) for name in ("stream", "astream")):
                raise TypeError(
                    f"FallbackModel model {index} must have a stream(request) or "
                    f"astream(request) method, got {model!r}"
                )
        kinds = {getattr(model, "asynchronous", None) for model in models} - {None}
        if len(kinds) > 1:
            raise TypeError(
                "FallbackModel: the models mix sync and async ones (asynchronous=False "
                "and True): give it adapters with async SDK clients for arun/adrive, or "
                "with sync clients for run/drive"
            )
        #: The models, in the order they are tried.
        self.models: tuple[Any, ...] = models
        #: ``True``/``False`` when a model declared its kind (all agree), else ``None``.
        self.asynchronous: bool | None = kinds.pop() if kinds else None

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(_name(model) for model in self.models)})"

    def stream(self, request: ModelRequest) -> Iterator[ModelReply]:
        """Stream the first model that starts answering ``request``.

        Raises:
            agentloop.ModelError: every model failed before its first chunk (the
                message names each failure; ``attempts`` lists them), or the model
                that had started answering failed.
            TypeError: a model that cannot be streamed synchronously.
        """
        tried = _Tried(self, request)
        for index, model in enumerate(self.models):
            try:
                for reply in model_method(model, False)(request):
                    yield tried.reply(reply)
                return
            except ModelError as error:
                tried.failed(index, error)
        raise tried.exhausted()

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelReply]:
        """:meth:`stream` for the asyncio drivers, over the models' ``astream``."""
        tried = _Tried(self, request)
        for index, model in enumerate(self.models):
            try:
                async with _opened(model_method(model, True)(request)) as replies:
                    async for reply in replies:
                        yield tried.reply(reply)
                return
            except ModelError as error:
                tried.failed(index, error)
        raise tried.exhausted()


class _Tried:
    """The models that failed one request, kept the same way by both paths."""

    __slots__ = ("attempts", "fallback", "request", "started")

    def __init__(self, fallback: FallbackModel, request: ModelRequest) -> None:
        self.fallback = fallback
        self.request = request
        self.attempts: list[ModelAttempt] = []
        self.started = False

    def reply(self, reply: ModelReply) -> ModelReply:
        """``reply`` to pass on (the one that ends the request carries the attempts)."""
        if type(reply) is ModelResponse or type(reply) is ModelFailure:
            reply = _with_attempts(reply, self.attempts)
        self.started = True
        return reply

    def failed(self, index: int, error: ModelError) -> None:
        """Record that model ``index`` failed; raise ``error`` if it had started."""
        if self.started:
            raise error
        models = self.fallback.models
        model = models[index]
        self.attempts.append(
            ModelAttempt(
                model=_name(model),
                error=error.message,
                kind=error.kind,
                status_code=error.status_code,
                usage=error.usage if type(error.usage) is Usage else None,
            )
        )
        if index + 1 < len(models):
            logger.warning(
                "%s failed for %s (%s); falling back to %s",
                _name(model),
                self.request.id,
                error.message,
                _name(models[index + 1]),
            )

    def exhausted(self) -> ModelError:
        """The error when every model failed."""
        attempts = self.attempts
        last = attempts[-1]
        summary = "; ".join(f"{a.model}: {a.error}" for a in attempts)
        return ModelError(
            f"all {len(attempts)} models failed: {summary}",
            kind=last.kind,
            status_code=last.status_code,
            attempts=tuple(attempts),
        )


@contextlib.asynccontextmanager
async def _opened(items: Any) -> AsyncIterator[AsyncIterator[ModelReply]]:
    """A model's ``astream`` result as an async iterator, closed on the way out
    (``async for`` alone would leave that to the event loop, later)."""
    if inspect.isawaitable(items):  # an ``async def`` returning the iterable
        items = await items
    replies = aiter(items)
    try:
        yield replies
    finally:
        aclose = getattr(replies, "aclose", None)
        if aclose is not None:
            await aclose()


def _with_attempts(
    reply: ModelResponse | ModelFailure, attempts: list[ModelAttempt]
) -> ModelResponse | ModelFailure:
    if not attempts:
        return reply
    return msgspec.structs.replace(reply, attempts=(*reply.attempts, *attempts))


def _name(model: object) -> str:
    text = repr(model)
    return text if len(text) <= 200 else text[:197] + "..."
