"""agentloop.evals: evaluate an agent on a dataset; compare runs; what-if replay.

- :class:`Case`, :class:`Dataset`: what the agent is asked and what is expected
  (JSON Lines files; YAML with ``pyyaml``).
- Evaluators (data, tagged by ``kind``): :class:`Exact`, :class:`Contains`,
  :class:`Regex`, :class:`Equals`, :class:`JsonSchema`, :class:`Trajectory`
  (with :class:`ExpectedCall`), :class:`Bounds`, :class:`Custom`, :class:`Judge`.
- :func:`run_eval` / :func:`arun_eval` with an :class:`Agent`: every case a session
  through ``arun``, its log kept; a :class:`Report` (table, JSON, HTML).
- :func:`compare`: two runs case by case, with where each pair of sessions
  diverges; :func:`rescore`: score a run again from its logs, judges included,
  with no model; :func:`what_if`: a recorded session under other limits, budget,
  hooks or approvals, with no model.
- ``python -m agentloop eval run|compare|rescore|what-if``; a pytest fixture
  (``agent_eval``, plugin ``agentloop.evals.pytest``).

``import agentloop`` does not import this package; it imports ``replay`` (it sits
above it) and never ``pyyaml`` unless a YAML file is read or written.
See docs/evals.md and DESIGN §28.
"""

from ._compare import GROUPS, CaseDiff, Comparison, Divergence, compare, timeless
from ._dataset import Case, Dataset, Expectation
from ._errors import DatasetError, EvalError
from ._evaluators import (
    Bounds,
    Contains,
    Custom,
    Equals,
    Evaluator,
    Exact,
    ExpectedCall,
    JsonSchema,
    Judge,
    Outcome,
    Regex,
    Score,
    Trajectory,
    validate_schema,
)
from ._report import REPORT_FORMAT, REPORT_VERSION, CaseReport, Report, Totals, load_report
from ._run import JUDGE_SYSTEM, Agent, Pricing, Verdict, arun_eval, rescore, run_eval
from ._whatif import UNCHANGED, WhatIf, what_if, what_if_logs

__all__ = [
    "GROUPS",
    "JUDGE_SYSTEM",
    "REPORT_FORMAT",
    "REPORT_VERSION",
    "UNCHANGED",
    "Agent",
    "Bounds",
    "Case",
    "CaseDiff",
    "CaseReport",
    "Comparison",
    "Contains",
    "Custom",
    "Dataset",
    "DatasetError",
    "Divergence",
    "Equals",
    "EvalError",
    "Evaluator",
    "Exact",
    "Expectation",
    "ExpectedCall",
    "JsonSchema",
    "Judge",
    "Outcome",
    "Pricing",
    "Regex",
    "Report",
    "Score",
    "Totals",
    "Trajectory",
    "Verdict",
    "WhatIf",
    "arun_eval",
    "compare",
    "load_report",
    "rescore",
    "run_eval",
    "timeless",
    "validate_schema",
    "what_if",
    "what_if_logs",
]
