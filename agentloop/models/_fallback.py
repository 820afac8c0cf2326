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

from collections.abc import Iterator

import msgspec

from .._driver import Model
from .._errors import ModelError
from .._protocol import ModelAttempt, ModelFailure, ModelRequest, ModelResponse, Usage
from ._common import ModelReply, logger

__all__ = ["FallbackModel"]


class FallbackModel:
    """Answer with ``primary``; when it fails before its first chunk, with the next.

    Args:
        primary: the model to ask first.
        *fallbacks: the models to ask next, in order (at least one).

    Raises:
        TypeError: a model without a ``stream(request)`` method, or no fallback.

    >>> from agentloop import ScriptedModel, ScriptedResponse, TextBlock
    >>> backup = ScriptedModel([ScriptedResponse("r1", (TextBlock("hi"),), "stop")])
    >>> FallbackModel(backup, ScriptedModel([]))  # doctest: +ELLIPSIS
    FallbackModel(ScriptedModel(...), ScriptedModel(...))
    """

    def __init__(self, primary: Model, *fallbacks: Model) -> None:
        if not fallbacks:
            raise TypeError("FallbackModel needs at least one fallback model after the primary")
        models = (primary, *fallbacks)
        for index, model in enumerate(models):
            if not callable(getattr(model, "stream", None)):
                raise TypeError(
                    f"FallbackModel model {index} must have a stream(request) method, got {model!r}"
                )
        #: The models, in the order they are tried.
        self.models: tuple[Model, ...] = models

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(_name(model) for model in self.models)})"

    def stream(self, request: ModelRequest) -> Iterator[ModelReply]:
        """Stream the first model that starts answering ``request``.

        Raises:
            agentloop.ModelError: every model failed before its first chunk (the
                message names each failure; ``attempts`` lists them), or the model
                that had started answering failed.
        """
        attempts: list[ModelAttempt] = []
        for index, model in enumerate(self.models):
            started = False
            try:
                for reply in model.stream(request):
                    if type(reply) is ModelResponse or type(reply) is ModelFailure:
                        reply = _with_attempts(reply, attempts)
                    started = True
                    yield reply
                return
            except ModelError as error:
                if started:
                    raise
                attempts.append(
                    ModelAttempt(
                        model=_name(model),
                        error=error.message,
                        kind=error.kind,
                        status_code=error.status_code,
                        usage=error.usage if type(error.usage) is Usage else None,
                    )
                )
                if index + 1 < len(self.models):
                    logger.warning(
                        "%s failed for %s (%s); falling back to %s",
                        _name(model),
                        request.id,
                        error.message,
                        _name(self.models[index + 1]),
                    )
        last = attempts[-1]
        summary = "; ".join(f"{a.model}: {a.error}" for a in attempts)
        raise ModelError(
            f"all {len(attempts)} models failed: {summary}",
            kind=last.kind,
            status_code=last.status_code,
            attempts=tuple(attempts),
        )


def _with_attempts(
    reply: ModelResponse | ModelFailure, attempts: list[ModelAttempt]
) -> ModelResponse | ModelFailure:
    if not attempts:
        return reply
    return msgspec.structs.replace(reply, attempts=(*reply.attempts, *attempts))


def _name(model: Model) -> str:
    text = repr(model)
    return text if len(text) <= 200 else text[:197] + "..."
