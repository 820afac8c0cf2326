"""Evaluators: what a case expects of its session, each a frozen Struct.

Every evaluator is data (a tagged Struct, ``kind`` names it), so a dataset file
holds them as plain JSON/YAML (``{"kind": "contains", "text": "42"}``) and a report
can say which one failed. Each has ``evaluate(outcome) -> Score`` except
:class:`Judge`, whose verdict comes from a model session the runner starts (see
``_run.py``).

Nothing here trusts the output it looks at: a final text of megabytes, JSON nested
100,000 levels deep, a missing field, a value of the wrong type -- each gives a
failed :class:`Score` with a reason, never an exception out of the run. An
evaluator that raises anyway (a custom function) is caught by the runner and
reported as that evaluator's error.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from agentloop import Event, RunResult, ToolCall, ToolCallEvent

__all__ = [
    "Bounds",
    "Contains",
    "Custom",
    "Equals",
    "Evaluator",
    "Exact",
    "ExpectedCall",
    "JsonSchema",
    "Judge",
    "Outcome",
    "Regex",
    "Score",
    "Trajectory",
    "load_function",
    "validate_schema",
]


class Score(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One evaluator's verdict on one case.

    Attributes:
        evaluator: what was checked (``contains '42'``).
        passed: whether the case meets it.
        score: from 0 to 1 (1 for a pass of a yes/no check).
        reason: why, in words (what was found instead).
        error: set when the evaluator could not judge (it raised, the judge
            answered garbage, the agent crashed); ``passed`` is then ``False``.
    """

    evaluator: str
    passed: bool
    score: float
    reason: str = ""
    error: str | None = None


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What the evaluators of a case look at.

    Attributes:
        case_id: the case.
        result: the session's :class:`~agentloop.RunResult` (``None`` when the
            agent crashed before it had one).
        events: the session's events.
        seconds: wall-clock duration of the session (``None``: unknown, e.g. a
            replayed one).
        cost: its cost, from the agent's :class:`~agentloop.evals.Pricing`.
        error: the agent's crash, when it crashed.
    """

    case_id: str
    result: RunResult | None
    events: tuple[Event, ...] = ()
    seconds: float | None = None
    cost: float | None = None
    error: str | None = None

    @property
    def final_text(self) -> str | None:
        return None if self.result is None else self.result.final_text

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls the session made, in order (from its ``tool.call`` events)."""
        return [event.call for event in self.events if type(event) is ToolCallEvent]


def _clip(text: str, width: int = 60) -> str:
    text = text if len(text) <= width else text[: width - 3] + "..."
    return repr(text)


def _yes(name: str, ok: bool, reason: str) -> Score:
    return Score(evaluator=name, passed=ok, score=1.0 if ok else 0.0, reason=reason)


def _no_text(name: str, outcome: Outcome) -> Score | None:
    if outcome.final_text is None:
        status = "no result" if outcome.result is None else outcome.result.status
        return _yes(name, False, f"no final text (the run ended {status})")
    return None


class Evaluator(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Base of the evaluators (don't subclass it: write a :class:`Custom` function)."""

    def describe(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not describe itself")

    def evaluate(self, outcome: Outcome) -> Score:
        raise NotImplementedError(f"{type(self).__name__} does not evaluate")


class Exact(Evaluator, frozen=True, kw_only=True, tag="exact"):
    """The final text equals ``text`` (after stripping both ends when ``strip``)."""

    text: str
    strip: bool = True

    def describe(self) -> str:
        return f"exact {_clip(self.text, 30)}"

    def evaluate(self, outcome: Outcome) -> Score:
        name = self.describe()
        missing = _no_text(name, outcome)
        if missing is not None:
            return missing
        got = outcome.final_text or ""
        want = self.text
        if self.strip:
            got, want = got.strip(), want.strip()
        return _yes(name, got == want, "" if got == want else f"the final text is {_clip(got)}")


class Contains(Evaluator, frozen=True, kw_only=True, tag="contains"):
    """The final text contains ``text`` (``ignore_case``: in any case)."""

    text: str
    ignore_case: bool = False

    def describe(self) -> str:
        return f"contains {_clip(self.text, 30)}"

    def evaluate(self, outcome: Outcome) -> Score:
        name = self.describe()
        missing = _no_text(name, outcome)
        if missing is not None:
            return missing
        got = outcome.final_text or ""
        ok = self.text.casefold() in got.casefold() if self.ignore_case else self.text in got
        return _yes(name, ok, "" if ok else f"not in the final text {_clip(got)}")


class Regex(Evaluator, frozen=True, kw_only=True, tag="regex"):
    """``pattern`` (Python :mod:`re` syntax) is found in the final text."""

    pattern: str

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"regex: {self.pattern!r} does not compile: {exc}") from None

    def describe(self) -> str:
        return f"regex {_clip(self.pattern, 30)}"

    def evaluate(self, outcome: Outcome) -> Score:
        name = self.describe()
        missing = _no_text(name, outcome)
        if missing is not None:
            return missing
        got = outcome.final_text or ""
        ok = re.search(self.pattern, got) is not None
        return _yes(name, ok, "" if ok else f"no match in the final text {_clip(got)}")


# --------------------------------------------------------------------------- structured output

_MISSING: Final = object()


def _structured(outcome: Outcome) -> tuple[Any, str]:
    """The run's structured output (``RunResult.output`` as JSON builtins, else its
    final text parsed as JSON), or ``(_MISSING, why not)``."""
    result = outcome.result
    if result is not None and result.output is not None:
        try:
            return msgspec.to_builtins(result.output), ""
        except (TypeError, RecursionError) as exc:
            return _MISSING, f"the output cannot be read as JSON: {exc}"
    text = outcome.final_text
    if text is None:
        status = "no result" if result is None else result.status
        return _MISSING, f"no final text (the run ended {status})"
    try:
        return msgspec.json.decode(text), ""
    except (msgspec.DecodeError, RecursionError) as exc:
        return _MISSING, f"the final text is not JSON ({exc}): {_clip(text)}"


class Equals(Evaluator, frozen=True, kw_only=True, tag="equals"):
    """The structured output (``RunResult.output``, else the final text as JSON)
    equals ``value`` (JSON equality: ``1`` and ``1.0`` are equal, ``1`` and ``true``
    are not)."""

    value: Any

    def describe(self) -> str:
        return f"equals {_clip(_json(self.value), 30)}"

    def evaluate(self, outcome: Outcome) -> Score:
        name = self.describe()
        got, why = _structured(outcome)
        if got is _MISSING:
            return _yes(name, False, why)
        ok = _json_equal(got, self.value)
        return _yes(name, ok, "" if ok else f"the output is {_clip(_json(got))}")


def _json(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, ValueError, OverflowError, RecursionError):
        return repr(value)[:200]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality, without recursion (deep values are fine)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        kind = _kind(x)
        if kind != _kind(y):
            return False
        if kind == "array":
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=False))
        elif kind == "object":
            if x.keys() != y.keys():
                return False
            stack.extend((x[key], y[key]) for key in x)
        elif x != y:
            return False
    return True


#: The JSON Schema keywords :func:`validate_schema` understands; any other is an error.
SCHEMA_KEYWORDS: Final = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "pattern",
        "title",
        "description",
        "$schema",
    }
)
_TYPES: Final = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


def _check_schema(schema: Any) -> None:
    """Raise ``ValueError`` for a schema outside the subset (checked when the
    evaluator is made, so a typo fails the dataset, not every case)."""
    stack = [("$", schema)]
    while stack:
        where, node = stack.pop()
        if type(node) is bool:
            continue
        if not isinstance(node, dict):
            raise ValueError(f"json_schema: the schema at {where} must be an object or a boolean")
        unknown = sorted(set(node) - SCHEMA_KEYWORDS)
        if unknown:
            raise ValueError(
                f"json_schema: keyword {unknown[0]!r} at {where} is not supported (the "
                f"subset: {', '.join(sorted(SCHEMA_KEYWORDS))})"
            )
        kinds = node.get("type", [])
        for kind in kinds if isinstance(kinds, list) else [kinds]:
            if kind not in _TYPES:
                raise ValueError(f"json_schema: unknown type {kind!r} at {where}")
        for name, sub in (node.get("properties") or {}).items():
            stack.append((f"{where}.properties.{name}", sub))
        for key in ("items", "additionalProperties"):
            if key in node:
                stack.append((f"{where}.{key}", node[key]))
        if "pattern" in node:
            try:
                re.compile(node["pattern"])
            except (re.error, TypeError) as exc:
                raise ValueError(f"json_schema: bad pattern at {where}: {exc}") from None


def validate_schema(value: Any, schema: Any, *, limit: int = 5) -> list[str]:
    """The ways ``value`` breaks ``schema`` (at most ``limit``), or ``[]``.

    A small subset of JSON Schema (:data:`SCHEMA_KEYWORDS`: ``type``, ``properties``,
    ``required``, ``additionalProperties``, ``items`` (one schema), ``enum``,
    ``const``, ``minimum``/``maximum``, ``minLength``/``maxLength``,
    ``minItems``/``maxItems``, ``pattern``). It walks the value with a stack, so a
    value of any depth is checked without recursion.
    """
    problems: list[str] = []
    stack: list[tuple[str, Any, Any]] = [("$", value, schema)]
    while stack and len(problems) < limit:
        where, node, rule = stack.pop()
        if rule is True:
            continue
        if rule is False:
            problems.append(f"{where}: no value is allowed here")
            continue
        kind = _kind(node)
        wanted = rule.get("type")
        if wanted is not None:
            kinds = wanted if isinstance(wanted, list) else [wanted]
            integral = kind == "number" and not isinstance(node, bool) and float(node).is_integer()
            if kind not in kinds and not ("integer" in kinds and integral):
                problems.append(f"{where}: expected {' or '.join(kinds)}, got {kind}")
                continue
        if "enum" in rule and not any(_json_equal(node, option) for option in rule["enum"]):
            problems.append(f"{where}: {_json(node)[:40]} is not one of {_json(rule['enum'])}")
        if "const" in rule and not _json_equal(node, rule["const"]):
            problems.append(f"{where}: expected {_json(rule['const'])}")
        if kind == "number":
            if "minimum" in rule and node < rule["minimum"]:
                problems.append(f"{where}: {node} is less than {rule['minimum']}")
            if "maximum" in rule and node > rule["maximum"]:
                problems.append(f"{where}: {node} is more than {rule['maximum']}")
        elif kind == "string":
            if "minLength" in rule and len(node) < rule["minLength"]:
                problems.append(f"{where}: shorter than {rule['minLength']} characters")
            if "maxLength" in rule and len(node) > rule["maxLength"]:
                problems.append(f"{where}: longer than {rule['maxLength']} characters")
            if "pattern" in rule and re.search(rule["pattern"], node) is None:
                problems.append(f"{where}: does not match {rule['pattern']!r}")
        elif kind == "array":
            if "minItems" in rule and len(node) < rule["minItems"]:
                problems.append(f"{where}: fewer than {rule['minItems']} items")
            if "maxItems" in rule and len(node) > rule["maxItems"]:
                problems.append(f"{where}: more than {rule['maxItems']} items")
            if "items" in rule:
                for index in range(len(node) - 1, -1, -1):
                    stack.append((f"{where}[{index}]", node[index], rule["items"]))
        elif kind == "object":
            for name in rule.get("required", ()):
                if name not in node:
                    problems.append(f"{where}: missing required field {name!r}")
            properties = rule.get("properties") or {}
            extra = rule.get("additionalProperties", True)
            for name in reversed(list(node)):
                if name in properties:
                    stack.append((f"{where}.{name}", node[name], properties[name]))
                elif extra is not True:
                    stack.append((f"{where}.{name}", node[name], extra))
    return problems[:limit]


class JsonSchema(Evaluator, frozen=True, kw_only=True, tag="json_schema"):
    """The structured output (as for :class:`Equals`) matches ``schema``, a JSON
    Schema in the subset :func:`validate_schema` checks. (For anything richer,
    give the agent ``output=<type>`` and check that the run completed.)"""

    schema: dict[str, Any]

    def __post_init__(self) -> None:
        _check_schema(self.schema)

    def describe(self) -> str:
        title = self.schema.get("title")
        return f"json_schema {title}" if isinstance(title, str) else "json_schema"

    def evaluate(self, outcome: Outcome) -> Score:
        name = self.describe()
        got, why = _structured(outcome)
        if got is _MISSING:
            return _yes(name, False, why)
        problems = validate_schema(got, self.schema)
        return _yes(name, not problems, "; ".join(problems))


# --------------------------------------------------------------------------- trajectory


class ExpectedCall(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool call a :class:`Trajectory` expects.

    Attributes:
        name: the tool's name.
        arguments: values the call's arguments must hold (a subset: other
            arguments may be there too; ``None``: any arguments).
        where: a predicate over the arguments, ``"module:function"`` or
            ``"path/to/file.py:function"``, called with the arguments dict and
            true when they are right.
    """

    name: str
    arguments: dict[str, Any] | None = None
    where: str | None = None

    def matches(self, call: ToolCall) -> bool:
        if call.name != self.name:
            return False
        if self.arguments is not None:
            for key, value in self.arguments.items():
                if key not in call.arguments or not _json_equal(call.arguments[key], value):
                    return False
        return self.where is None or bool(load_function(self.where)(call.arguments))

    def describe(self) -> str:
        return self.name if self.arguments is None else f"{self.name}({_json(self.arguments)})"


class Trajectory(Evaluator, frozen=True, kw_only=True, tag="trajectory"):
    """The session's tool calls, against ``calls``.

    ``mode``:

    - ``in_order`` (default): the expected calls happen in this order, other
      calls may come between them;
    - ``exact``: the session makes exactly these calls, in this order;
    - ``subset``: each expected call happens, in any order.

    The score is the share of expected calls found (1 for ``exact`` only when all
    match and nothing else was called).
    """

    calls: tuple[ExpectedCall, ...]
    mode: Literal["in_order", "exact", "subset"] = "in_order"

    def describe(self) -> str:
        names = ", ".join(call.name for call in self.calls[:4])
        more = f", +{len(self.calls) - 4}" if len(self.calls) > 4 else ""
        return f"trajectory {self.mode} [{names}{more}]"

    def evaluate(self, outcome: Outcome) -> Score:
        name = self.describe()
        made = outcome.tool_calls
        found = 0
        if self.mode == "exact":
            found = sum(
                1 for want, call in zip(self.calls, made, strict=False) if want.matches(call)
            )
            ok = found == len(self.calls) == len(made)
        elif self.mode == "in_order":
            position = 0
            for want in self.calls:
                while position < len(made) and not want.matches(made[position]):
                    position += 1
                if position == len(made):
                    break
                found += 1
                position += 1
            ok = found == len(self.calls)
        else:
            left = list(made)
            for want in self.calls:
                hit = next((i for i, call in enumerate(left) if want.matches(call)), None)
                if hit is not None:
                    found += 1
                    del left[hit]
            ok = found == len(self.calls)
        score = found / len(self.calls) if self.calls else (1.0 if ok else 0.0)
        if self.mode == "exact" and not ok:
            score = min(score, 0.99)
        reason = ""
        if not ok:
            shown = ", ".join(f"{c.name}({_clip(_json(c.arguments), 40)[1:-1]})" for c in made[:6])
            more = f", +{len(made) - 6}" if len(made) > 6 else ""
            reason = f"{found} of {len(self.calls)} matched; calls made: [{shown}{more}]"
        return Score(evaluator=name, passed=ok, score=score, reason=reason)


# --------------------------------------------------------------------------- bounds


class Bounds(Evaluator, frozen=True, kw_only=True, omit_defaults=True, tag="bounds"):
    """Limits on the session: each one given must hold.

    Attributes:
        status: the run's status must be this (e.g. ``completed``).
        max_steps: model steps.
        max_tool_calls: tool calls.
        max_tokens: input + output tokens.
        max_cost: cost (needs the agent's ``pricing``).
        max_seconds: wall-clock seconds of the session.
    """

    status: str | None = None
    max_steps: int | None = None
    max_tool_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None

    def describe(self) -> str:
        parts = [
            f"{key}={value}"
            for key, value in msgspec.structs.asdict(self).items()
            if value is not None
        ]
        return f"bounds {' '.join(parts)}".rstrip()

    def evaluate(self, outcome: Outcome) -> Score:
        name = self.describe()
        result = outcome.result
        if result is None:
            return _yes(name, False, "no result (the agent crashed)")
        usage = result.usage
        measured: list[tuple[str, Any, Any]] = [
            ("steps", result.steps, self.max_steps),
            ("tool calls", len(outcome.tool_calls), self.max_tool_calls),
            ("tokens", usage.input_tokens + usage.output_tokens, self.max_tokens),
            ("cost", outcome.cost, self.max_cost),
            ("seconds", outcome.seconds, self.max_seconds),
        ]
        broken: list[str] = []
        if self.status is not None and result.status != self.status:
            broken.append(f"status {result.status} ({result.reason}), not {self.status}")
        for what, value, bound in measured:
            if bound is None:
                continue
            if value is None:
                broken.append(f"{what} unknown (bound {bound})")
            elif value > bound:
                shown = f"{value:.4g}" if isinstance(value, float) else str(value)
                broken.append(f"{what} {shown} > {bound}")
        return _yes(name, not broken, "; ".join(broken))


# --------------------------------------------------------------------------- custom

_LOADED: dict[str, Callable[..., Any]] = {}


def load_function(spec: str) -> Callable[..., Any]:
    """The function a ``"module:function"`` or ``"path/to/file.py:function"`` spec
    names (a file is loaded as a module once; later specs reuse it).

    Raises:
        ValueError: the spec is malformed, or names nothing callable.
        ImportError, OSError: the module or file cannot be loaded.
    """
    cached = _LOADED.get(spec)
    if cached is not None:
        return cached
    module_name, colon, attribute = spec.rpartition(":")
    if not colon or not module_name or not attribute.isidentifier():
        raise ValueError(f"{spec!r} is not 'module:function' or 'path/to/file.py:function'")
    if module_name.endswith(".py"):
        path = Path(module_name).resolve()
        name = f"_agentloop_evals_{abs(hash(str(path)))}"
        module = sys.modules.get(name)
        if module is None:
            if not path.is_file():
                raise OSError(f"{spec!r}: no such file {module_name}")
            loader = importlib.util.spec_from_file_location(name, path)
            assert loader is not None and loader.loader is not None  # a .py file has one
            module = importlib.util.module_from_spec(loader)
            sys.path.insert(0, str(path.parent))  # its own imports, as `python file.py`
            try:
                sys.modules[name] = module
                loader.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
            finally:
                sys.path.remove(str(path.parent))
    else:
        module = importlib.import_module(module_name)
    function = getattr(module, attribute, None)
    if not callable(function):
        raise ValueError(f"{spec!r}: {module_name} has no function {attribute!r}")
    _LOADED[spec] = function
    return function  # type: ignore[no-any-return]


class Custom(Evaluator, frozen=True, kw_only=True, omit_defaults=True, tag="custom"):
    """A Python function judges the case: ``function`` is ``"module:function"`` or
    ``"path/to/file.py:function"``, called with the :class:`Outcome`.

    It returns a ``bool`` (passed), a number from 0 to 1 (the score; passed when
    at least ``threshold``), or a :class:`Score`. Anything else, or an exception,
    is this evaluator's error for that case.
    """

    function: str
    threshold: float = 1.0

    def describe(self) -> str:
        return f"custom {self.function.rpartition(':')[2]}"

    def evaluate(self, outcome: Outcome) -> Score:
        return verdict(self.describe(), load_function(self.function)(outcome), self.threshold)


def verdict(name: str, value: Any, threshold: float = 1.0) -> Score:
    """A custom function's answer as a :class:`Score` (see :class:`Custom`)."""
    if type(value) is Score:
        return value
    if isinstance(value, bool):
        return _yes(name, value, "")
    if isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1:
        return Score(evaluator=name, passed=value >= threshold, score=float(value))
    return Score(
        evaluator=name,
        passed=False,
        score=0.0,
        error=f"returned {repr(value)[:60]}; expected a bool, a number from 0 to 1 or a Score",
    )


# --------------------------------------------------------------------------- judge


class Judge(Evaluator, frozen=True, kw_only=True, omit_defaults=True, tag="judge"):
    """A model grades the final answer against ``rubric``, from 0 to 1.

    The judge is the agent's ``judge`` model (:class:`~agentloop.evals.Agent`),
    run as a session of its own (one user message, no tools, structured output
    ``{"score": number, "reason": string}``), whose log is kept next to the case's:
    re-scoring a report replays that log instead of calling the judge. Passed when
    the score is at least ``threshold``.
    """

    rubric: str
    threshold: float = 0.5

    def describe(self) -> str:
        return f"judge {_clip(self.rubric, 30)}"

    def evaluate(self, outcome: Outcome) -> Score:
        raise NotImplementedError("a Judge is evaluated by the runner, through a model session")
