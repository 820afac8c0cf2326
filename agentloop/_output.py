"""Structured output (DESIGN §19): the final answer decoded to a type.

``agent_loop(..., output=T)`` checks every final answer: its text must be JSON
that decodes to ``T`` (a msgspec Struct, a dataclass, a TypedDict, any type
msgspec decodes; a pydantic model through its own validation). An answer that
does not decode goes back to the model as a user message saying why, and the loop
takes another step; after ``output_retries`` such retries the run fails with
``OUTPUT_INVALID``. ``RunResult.output`` holds the decoded value.

The type is code, not data: ``session.start`` records an :class:`OutputSpec` (the
type's name, its JSON Schema and the retries), and ``run.finished`` the decoded
value as JSON. A replay without the type follows the verdicts the log records
(:class:`RecordedOutput`); ``replay.resume``/``fork`` need the type to go on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ._deep import encode, parse

__all__ = [
    "OutputCheck",
    "OutputSpec",
    "RecordedOutput",
    "is_pydantic_model",
    "output_check",
    "pydantic_errors",
]

#: A fenced block around the whole answer (```json ... ```), which models often add.
_FENCE: Final = re.compile(r"\A\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n?\s*```\s*\Z", re.DOTALL)


class OutputSpec(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """What ``session.start`` records of a run's ``output`` option.

    Attributes:
        name: the type's name (``Weather``).
        schema: its JSON Schema (what an adapter may send as the provider's
            response format).
        retries: ``output_retries``.
    """

    name: str
    schema: dict[str, Any] = msgspec.field(default_factory=dict)
    retries: int = 2


class OutputCheck:
    """Decodes a final answer to the output type (the engine's side of ``output=``)."""

    def __init__(self, spec: OutputSpec) -> None:
        self.spec = spec

    def check(self, text: str) -> tuple[Any, Any, str | None]:
        """``(value, value as JSON builtins, None)``, or ``(None, None, why it does
        not decode)``."""
        raise NotImplementedError  # pragma: no cover - every subclass overrides it

    def retry_text(self, error: str) -> str:
        """The user message that sends a decode error back to the model."""
        return (
            f"Your answer is not valid JSON for {self.spec.name}: {error}. "
            "Answer again with only the JSON value, matching the schema."
        )

    def failure_text(self, error: str) -> str:
        """The run's error message (after ``step N: ``) when the retries are used up."""
        return f"the final answer does not decode to {self.spec.name}: {error}"


class _MsgspecOutput(OutputCheck):
    def __init__(self, kind: Any, retries: int) -> None:
        try:
            self._decoder = msgspec.json.Decoder(kind)
            schema = msgspec.json.schema(kind)
        except TypeError as exc:
            raise TypeError(f"output: {kind!r} is not a type msgspec can decode: {exc}") from None
        super().__init__(OutputSpec(name=_name(kind), schema=schema, retries=retries))
        self._kind = kind

    def check(self, text: str) -> tuple[Any, Any, str | None]:
        body = _unfenced(text)
        try:
            decoded = self._decoder.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return None, None, str(exc)
        except RecursionError:
            return self._check_deep(body)
        # (to_builtins goes exactly as deep as the decode that just succeeded.)
        return decoded, msgspec.to_builtins(decoded), None

    def _check_deep(self, body: str) -> tuple[Any, Any, str | None]:
        """:meth:`check` for an answer nested deeper than msgspec decodes (it gives
        up about a thousand levels down, fewer when the stack is already deep): the
        JSON is read without recursion and converted to the type, which gives the
        same verdict and value, so the outcome does not depend on the stack."""
        try:
            decoded = msgspec.convert(parse(body), self._kind)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return None, None, str(exc)
        except RecursionError:  # a recursive type, matched all the way down
            return None, None, "nested too deep to decode"
        return decoded, parse(encode(decoded)), None


class _PydanticOutput(OutputCheck):
    def __init__(self, model: Any, retries: int) -> None:
        schema = model.model_json_schema()
        super().__init__(OutputSpec(name=_name(model), schema=schema, retries=retries))
        self._model = model

    def check(self, text: str) -> tuple[Any, Any, str | None]:
        import pydantic  # only here: pydantic stays an optional extra

        try:
            decoded = self._model.model_validate_json(_unfenced(text))
        except pydantic.ValidationError as exc:
            return None, None, pydantic_errors(exc)
        return decoded, decoded.model_dump(mode="json"), None


class RecordedOutput(OutputCheck):
    """The verdicts a log records, in order: what a replay without the type follows.

    ``verdicts`` holds, for each final answer checked, the error text (it did not
    decode) or ``None`` (it did; the value is ``output``, from ``run.finished``).
    An error text is the recorded message itself (a retry message's content, or
    the failure's message after ``step N: ``). Asked past the last verdict (a live
    continuation), it raises ``ValueError``.
    """

    def __init__(self, spec: OutputSpec, verdicts: Sequence[str | None], output: Any) -> None:
        super().__init__(spec)
        self._verdicts = list(verdicts)
        self._next = 0
        self._output = output

    def check(self, text: str) -> tuple[Any, Any, str | None]:
        if self._next >= len(self._verdicts):
            raise ValueError(
                f"the log records no check of this answer against {self.spec.name}: "
                f"pass output={self.spec.name} to go on past the log"
            )
        error = self._verdicts[self._next]
        self._next += 1
        if error is not None:
            return None, None, error
        return self._output, self._output, None

    def retry_text(self, error: str) -> str:
        return error

    def failure_text(self, error: str) -> str:
        return error


def output_check(output: object, retries: object) -> OutputCheck | None:
    """The checker for ``agent_loop``'s ``output``/``output_retries`` options.

    Raises:
        TypeError, ValueError: naming the option that is wrong.
    """
    if type(retries) is not int or not 0 <= retries <= _MAX_RETRIES:
        raise ValueError(f"output_retries must be an int from 0 to {_MAX_RETRIES}, got {retries!r}")
    if output is None:
        return None
    if isinstance(output, OutputCheck):
        return output
    if is_pydantic_model(output):
        return _PydanticOutput(output, retries)
    return _MsgspecOutput(output, retries)


_MAX_RETRIES: Final = 2**31 - 1


def pydantic_errors(exc: Any) -> str:
    """A pydantic ``ValidationError`` on one line: ``age: Input should be ...; ...``
    (no documentation links, which change with pydantic's version)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or '$'}: {error['msg']}"
        for error in exc.errors(include_url=False)
    )


def is_pydantic_model(kind: object) -> bool:
    """A pydantic model class (duck-typed: pydantic is not imported to tell)."""
    return (
        isinstance(kind, type)
        and callable(getattr(kind, "model_json_schema", None))
        and callable(getattr(kind, "model_validate_json", None))
    )


def _name(kind: Any) -> str:
    return getattr(kind, "__name__", None) or repr(kind)


def _unfenced(text: str) -> str:
    match = _FENCE.match(text)
    return match.group(1) if match else text
