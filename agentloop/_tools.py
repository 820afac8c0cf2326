"""Tools: typed Python functions the driver runs for the model (DESIGN §13).

``@tool`` turns a function into a :class:`Tool`: a :class:`ToolSpec` the model is
shown (name, description, JSON Schema built from the signature by msgspec) plus the
function. :meth:`Tool.execute` is the *tool boundary*: it converts the model's
arguments to the annotated types with ``msgspec.convert``, calls the function and
turns every outcome, including bad arguments and exceptions, into
``(content, is_error)``. Errors there are results the model can read and recover
from, never exceptions out of the loop.

The engine itself never calls tools; :func:`agentloop.run` does, through a
:class:`ToolRegistry`.
"""

from __future__ import annotations

import copy
import inspect
import typing
from collections.abc import Callable, Iterable, Iterator
from typing import Any, overload

import msgspec

from ._docstrings import parameter_descriptions
from ._idempotency import _keyed
from ._json import non_finite_path
from ._messages import AudioBlock, Content, DocumentBlock, ImageBlock, TextBlock, ToolCall
from ._offload import offload
from ._output import is_pydantic_model, pydantic_errors
from ._text import exception_text
from ._toolspec import ToolSpec

__all__ = ["Tool", "ToolRegistry", "tool"]

_SCALAR_DEFAULTS = (type(None), bool, int, float, str, bytes, tuple, frozenset)


class Tool:
    """A Python function exposed to the model, with its spec.

    Build one with :func:`tool`. Calling the ``Tool`` calls the function directly
    (handy in unit tests); :meth:`execute` is what the driver uses.

    Attributes:
        spec: what the model is told (name, description, parameters schema).
        fn: the wrapped function.
    """

    __slots__ = ("_arguments", "_async", "_async_of", "_models", "_positional", "fn", "spec")

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool = False,
        sequential: bool = False,
    ) -> None:
        """Inspect ``fn`` and build its spec and argument type.

        Args:
            fn: a function (``def`` or ``async def``) whose parameters are all
                annotated. An ``async def`` tool runs under ``agentloop.arun``;
                ``run`` refuses it.
            name: the tool name; defaults to ``fn.__name__``.
            description: defaults to ``fn``'s docstring, cleaned with ``inspect.cleandoc``.
                The parameters described in its ``Args:`` (Google) or ``Parameters``
                (NumPy) section get that text as their schema ``description``.
            requires_approval: the loop pauses (reason ``approval``) before each call.
            sequential: never run in a parallel tool batch (see :class:`ToolSpec`).

        A parameter annotated with a pydantic model class gets the model's JSON
        Schema, and its argument is validated by pydantic (``pip install
        'agentloop-replay[pydantic]'``).

        Raises:
            TypeError: ``fn`` is not callable (or an async generator), takes ``*args`` or
                ``**kwargs``, has an unannotated parameter, or an annotation or default
                that msgspec cannot describe as JSON Schema.
            ValueError: the name is not a valid tool name (see :class:`ToolSpec`).
        """
        if not callable(fn):
            raise TypeError(f"@tool needs a function, got {fn!r}")
        if inspect.isasyncgenfunction(fn):
            raise TypeError(
                f"@tool {_qualname(fn)}: async generator functions are not supported; "
                "a tool returns one value (make it an async def that returns it)"
            )
        tool_name = fn.__name__ if name is None else name
        if description is None:
            description = inspect.cleandoc(fn.__doc__) if fn.__doc__ else ""
        self.fn = fn
        self._arguments, self._positional, self._models = _arguments_type(fn, tool_name)
        parameters = _object_schema(self._arguments, tool_name, self._models)
        _describe(parameters, parameter_descriptions(fn.__doc__))
        self.spec = ToolSpec(
            name=tool_name,
            description=description,
            parameters=parameters,
            requires_approval=requires_approval,
            sequential=sequential,
        )

    @property
    def name(self) -> str:
        """The tool's name (``spec.name``)."""
        return self.spec.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.spec.name!r} -> {_qualname(self.fn)}>"

    @property
    def is_async(self) -> bool:
        """Whether the function is an ``async def`` (only async drivers can run it)."""
        fn = self.fn
        if getattr(self, "_async_of", None) is not fn:  # once per function: inspect is slow
            self._async_of, self._async = fn, inspect.iscoroutinefunction(fn)
        return self._async

    def execute(self, call: ToolCall) -> tuple[Content, bool]:
        """Run the function for ``call`` and return ``(content, is_error)``.

        Arguments are converted with ``msgspec.convert`` in strict mode: a JSON
        value must already have the annotated type (``"20"`` is not an ``int``),
        so the schema the model was shown is exactly what is accepted, and a
        mistake comes back as a readable error the model can correct.

        Returns:
            ``(content, False)`` on success: a ``str`` return value as is; a block
            (:class:`TextBlock`, :class:`ImageBlock`, :class:`AudioBlock`,
            :class:`DocumentBlock`) or a list or tuple of them as a tuple of parts;
            anything else encoded as compact JSON. ``(message, True)`` when the arguments do
            not convert (``invalid arguments: ...``), the function raises
            (``"<ExcType>: <message>"``) or its return value cannot be encoded.

        Raises:
            TypeError: the function is ``async def``: await :meth:`aexecute` instead.
        """
        if self.is_async:
            raise TypeError(
                f"tool {self.name!r} is an async function: await its aexecute() "
                "(agentloop.arun does), or make it a plain function"
            )
        prepared = self._prepare(call)
        if isinstance(prepared, str):
            return prepared, True
        args, kwargs = prepared
        try:
            with _keyed(call.id):  # idempotency_key() inside the function
                value = self.fn(*args, **kwargs)
        except Exception as exc:
            return exception_text(exc), True
        return _content(value)

    async def aexecute(self, call: ToolCall) -> tuple[Content, bool]:
        """:meth:`execute` for async drivers: an ``async def`` tool is awaited, a sync
        one runs in a worker thread (a reused one: ``_offload``; context variables
        go along, as with ``asyncio.to_thread``), so it never blocks the event loop."""
        prepared = self._prepare(call)
        if isinstance(prepared, str):
            return prepared, True
        args, kwargs = prepared
        try:
            with _keyed(call.id):  # idempotency_key(): offload copies the context
                if self.is_async:
                    value = await self.fn(*args, **kwargs)
                else:
                    value = await offload(_stop_as_value, self.fn, args, kwargs)
                    if type(value) is _Stopped:
                        raise value.exc
        except Exception as exc:
            return exception_text(exc), True
        return _content(value)

    def _prepare(self, call: ToolCall) -> tuple[list[Any], dict[str, Any]] | str:
        """The call's arguments converted for ``fn`` (positional, keyword), or the
        error message when they do not convert."""
        try:
            arguments = msgspec.convert(call.arguments, type=self._arguments)
        except msgspec.ValidationError as exc:
            return f"invalid arguments: {exc}"
        values = msgspec.structs.asdict(arguments)
        if self._models:
            problem = _validate_models(self._models, values)
            if problem is not None:
                return problem
        return [values.pop(name) for name in self._positional], values


class _Stopped:
    """A ``StopIteration`` a sync tool raised in its worker thread, carried out as a
    value: raised into the thread's future, it cannot be set there (asyncio refuses
    a ``StopIteration`` in a future) and the future would never complete."""

    __slots__ = ("exc",)

    def __init__(self, exc: StopIteration) -> None:
        self.exc = exc


def _stop_as_value(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` in a worker thread, a ``StopIteration`` returned as
    :class:`_Stopped` (then raised in the event loop's thread: a tool error, as
    under :func:`agentloop.run`)."""
    try:
        return fn(*args, **kwargs)
    except StopIteration as exc:
        return _Stopped(exc)


_PART_TYPES = (TextBlock, ImageBlock, AudioBlock, DocumentBlock)


def _content(value: Any) -> tuple[Content, bool]:
    """A tool's return value as result content: a ``str`` as is, a block or a
    sequence of blocks as a tuple of parts, else compact JSON.

    A list or tuple that mixes blocks with other values is an error: encoded as
    JSON, its bytes would reach the model as base64 text.
    """
    kind = type(value)
    if kind is str:
        return value, False
    if kind in _PART_TYPES:
        return (value,), False
    if (kind is list or kind is tuple) and value:
        blocks = [type(item) in _PART_TYPES for item in value]
        if all(blocks):
            return tuple(value), False
        if any(blocks):
            index = blocks.index(False)
            return (
                "the tool returned a list mixing blocks with other values: item "
                f"[{index}] is a {type(value[index]).__name__} (return only blocks, with "
                "TextBlock for text, or only JSON values)",
                True,
            )
    try:
        data = msgspec.json.encode(value)
        # msgspec writes NaN and infinities as null: a tool's NaN would reach the
        # model (and the log) as "null", silently. Only null holds a look.
        where = non_finite_path(msgspec.to_builtins(value)) if b"null" in data else None
    except Exception as exc:
        return f"cannot encode the result as JSON: {exception_text(exc)}", True
    if where is not None:
        return f"cannot encode the result as JSON: {where} is not a finite number", True
    return data.decode(), False


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    sequential: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    sequential: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` from a typed function; use bare or with options.

    >>> @tool
    ... def add(left: int, right: int) -> dict[str, int]:
    ...     '''Add two integers.'''
    ...     return {"sum": left + right}
    >>> add.spec.parameters["required"]
    ['left', 'right']
    >>> add.execute(ToolCall("c1", "add", {"left": 20, "right": 22}))
    ('{"sum":42}', False)

    Args:
        fn: the function (when used bare, ``@tool``).
        name: overrides the function's name.
        description: overrides its docstring.
        requires_approval: pause for approval before each call.
        sequential: never run in a parallel tool batch (see :class:`ToolSpec`).

    Returns:
        A :class:`Tool`, or a decorator making one when ``fn`` is omitted.

    Raises:
        TypeError: see :class:`Tool`.
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "requires_approval": requires_approval,
        "sequential": sequential,
    }
    if fn is not None:
        return Tool(fn, **options)

    def decorate(fn: Callable[..., Any]) -> Tool:
        return Tool(fn, **options)

    return decorate


class ToolRegistry:
    """The tools of a run, by name, in registration order.

    Holds :class:`Tool` objects and bare :class:`ToolSpec` values (a spec the model
    may call but that has no local implementation; executing it gives an error
    result). Plain functions are wrapped with :func:`tool` on registration.

    Iterating yields the registered entries (so ``ToolRegistry(list(registry))``
    copies a registry); ``in`` accepts a name or an entry.
    """

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool | ToolSpec | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool | ToolSpec] = {}
        if type(tools) is ToolRegistry:  # a copy: its entries were checked when registered
            self._tools.update(tools._tools)
            return
        for entry in tools:
            self.register(entry)

    def register(self, tool: Tool | ToolSpec | Callable[..., Any]) -> Tool | ToolSpec:
        """Add a tool, a bare spec, or a function (wrapped with :func:`tool`).

        Returns:
            The registered entry.

        Raises:
            ValueError: a tool with that name is already registered.
            TypeError: ``tool`` is none of the accepted kinds.
        """
        if not isinstance(tool, (Tool, ToolSpec)):
            if not callable(tool):
                raise TypeError(f"expected a Tool, a ToolSpec or a function, got {tool!r}")
            tool = Tool(tool)
        spec = tool if isinstance(tool, ToolSpec) else tool.spec
        if spec.name in self._tools:
            raise ValueError(f"tool {spec.name!r} is already registered")
        self._tools[spec.name] = tool
        return tool

    def specs(self) -> tuple[ToolSpec, ...]:
        """The specs of every registered tool, in order (a snapshot)."""
        return tuple([t if isinstance(t, ToolSpec) else t.spec for t in self._tools.values()])

    def get(self, name: str) -> Tool | ToolSpec | None:
        """The entry registered under ``name``, or ``None``."""
        return self._tools.get(name)

    def execute(self, call: ToolCall) -> tuple[Content, bool]:
        """Run ``call`` with the tool of that name; see :meth:`Tool.execute`.

        Returns:
            ``(content, is_error)``; an unknown name or a spec without an
            implementation is an error result, not an exception.
        """
        entry = self._runnable(call)
        return entry if type(entry) is tuple else entry.execute(call)  # type: ignore[union-attr]

    async def aexecute(self, call: ToolCall) -> tuple[Content, bool]:
        """:meth:`execute` for async drivers (see :meth:`Tool.aexecute`)."""
        entry = self._runnable(call)
        return entry if type(entry) is tuple else await entry.aexecute(call)  # type: ignore[union-attr]

    def _runnable(self, call: ToolCall) -> Tool | tuple[Content, bool]:
        """The tool that runs ``call``, or the error result when none can."""
        entry = self._tools.get(call.name)
        if entry is None:
            return f"unknown tool {call.name!r}", True
        if isinstance(entry, ToolSpec):
            return f"tool {call.name!r} has no implementation", True
        return entry

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool | ToolSpec]:
        return iter(tuple(self._tools.values()))

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return item in self._tools
        if isinstance(item, (Tool, ToolSpec)):
            name = item.name
            return self._tools.get(name) is item or self._tools.get(name) == item
        return False

    def __repr__(self) -> str:
        return f"<ToolRegistry {list(self._tools)}>"


# --------------------------------------------------------------------------- helpers


def _qualname(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _arguments_type(
    fn: Callable[..., Any], tool_name: str
) -> tuple[type[msgspec.Struct], tuple[str, ...], dict[str, Any]]:
    """Build the Struct the arguments object converts to, from ``fn``'s signature.

    Returns the Struct type, the names of positional-only parameters (which must
    be passed positionally when calling ``fn``) and the parameters annotated with
    a pydantic model (their field in the Struct takes any JSON object; pydantic
    validates it).
    """
    where = f"@tool {_qualname(fn)}"
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where}: cannot read its signature: {exc}") from None
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise TypeError(f"{where}: cannot resolve its annotations: {exc}") from None
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    positional: list[str] = []
    models: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            star = "*" if parameter.kind is parameter.VAR_POSITIONAL else "**"
            raise TypeError(
                f"{where}: {star}{parameter.name} is not supported; a tool's arguments are "
                f"a JSON object with named, annotated fields"
            )
        if parameter.name not in hints:
            raise TypeError(
                f"{where}: parameter {parameter.name!r} has no type annotation; every "
                f"parameter needs one (it becomes the tool's JSON Schema)"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            positional.append(parameter.name)
        annotation = hints[parameter.name]
        if is_pydantic_model(annotation):
            models[parameter.name] = annotation
            annotation = dict[str, Any]
        default = parameter.default
        if default is parameter.empty:
            fields.append((parameter.name, annotation))
        elif isinstance(default, _SCALAR_DEFAULTS):
            fields.append((parameter.name, annotation, default))
        else:
            # Mutable defaults get a fresh deep copy per call, so a tool can never
            # see state left behind by an earlier call.
            factory = _copier(default)
            fields.append((parameter.name, annotation, msgspec.field(default_factory=factory)))
    # kw_only lets required parameters follow defaulted ones, as keyword-only
    # parameters may; forbid_unknown_fields makes a misspelt argument an error
    # instead of being silently dropped.
    struct = msgspec.defstruct(
        f"{tool_name}__arguments", fields, kw_only=True, forbid_unknown_fields=True
    )
    return struct, tuple(positional), models


def _validate_models(models: dict[str, Any], values: dict[str, Any]) -> str | None:
    """Replace each pydantic-model argument in ``values`` by the validated model;
    return the error result's text for the first that does not validate."""
    import pydantic  # only for tools that take pydantic models

    for name, model in models.items():
        try:
            values[name] = model.model_validate(values[name])
        except pydantic.ValidationError as exc:
            return f"invalid arguments: {name}: {pydantic_errors(exc)}"
    return None


def _describe(schema: dict[str, Any], descriptions: dict[str, str]) -> None:
    """Give each property described in the docstring that text as its ``description``
    (a description the schema already has, e.g. from ``Annotated``, stays)."""
    properties = schema["properties"]
    for name, text in descriptions.items():
        prop = properties.get(name)
        if prop is not None and "description" not in prop:
            properties[name] = {**prop, "description": text}


def _copier(value: Any) -> Callable[[], Any]:
    return lambda: copy.deepcopy(value)


def _object_schema(
    struct: type[msgspec.Struct], tool_name: str, models: dict[str, Any]
) -> dict[str, Any]:
    """The JSON Schema of the arguments object, with the root definition inlined.

    msgspec returns ``{"$ref": ..., "$defs": {...}}``; providers want an object
    schema at the root, so the root definition is lifted out and any other
    definitions (nested Structs, enums) stay under ``$defs`` where the refs point.
    A pydantic model parameter's property is the model's own schema (its
    definitions joining ``$defs``).
    """
    try:
        schema = msgspec.json.schema(struct)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"@tool {tool_name}: cannot describe its parameters as JSON Schema: {exc}"
        ) from None
    defs: dict[str, Any] = dict(schema["$defs"])
    root: dict[str, Any] = dict(defs.pop(schema["$ref"].rsplit("/", 1)[-1]))
    root.pop("title", None)
    root.setdefault("properties", {})
    root.setdefault("required", [])
    if models:
        properties = dict(root["properties"])
        for name, model in models.items():
            model_schema = dict(model.model_json_schema(ref_template="#/$defs/{model}"))
            defs.update(model_schema.pop("$defs", {}))
            properties[name] = model_schema
        root["properties"] = properties
    if defs:
        root["$defs"] = defs
    return root
