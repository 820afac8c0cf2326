"""The machinery every adapter shares, on its own: the retry policy and the wait a
provider asks for, argument decoding, error kinds, response-format names; and the
examples of docs/providers.md."""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop import OutputSpec, ProviderBlock
from agentloop.models import RetryPolicy
from agentloop.models._common import (
    MalformedOutput,
    decode_arguments,
    kind_from_status,
    output_system,
    retry_after,
    schema_name,
)

ROOT = Path(__file__).resolve().parent.parent.parent

# =========================================================================== retry policy


@pytest.mark.parametrize(
    "bad",
    [
        {"attempts": 0},
        {"backoff_seconds": -1},
        {"multiplier": 0.5},
        {"max_backoff_seconds": True},
        {"multiplier": "2"},
        {"backoff_seconds": math.nan},
        {"multiplier": math.nan},
        {"max_retry_after_seconds": -1},
        {"max_retry_after_seconds": math.nan},
        {"max_retry_after_seconds": "60"},
    ],
)
def test_policy_validation(bad: dict[str, Any]) -> None:
    name = next(iter(bad))
    with pytest.raises(ValueError, match=f"RetryPolicy.{name} must be a"):
        RetryPolicy(**bad)


def test_backoff_is_capped() -> None:
    policy = RetryPolicy(10, 1.0, multiplier=10.0, max_backoff_seconds=5.0)
    assert [policy.delay(n) for n in (1, 2, 3)] == [1.0, 5.0, 5.0]


@pytest.mark.parametrize(
    ("asked", "cap", "wait"),
    [
        (None, 60.0, 1.0),  # no ask: the backoff
        (20.0, 60.0, 20.0),  # the ask, even past the backoff's own cap of 5 s
        (0.25, 60.0, 0.25),  # the ask, even shorter than the backoff
        (60.0, 60.0, 60.0),
        (60.5, 60.0, None),  # more than the policy waits: not retried
        (math.inf, math.inf, None),  # (never an endless sleep)
        (1e9, math.inf, 1e9),
        (math.nan, 60.0, 1.0),  # not an ask
        (-5.0, 60.0, 1.0),
    ],
)
def test_the_wait_asked_replaces_the_backoff_up_to_the_cap(
    asked: float | None, cap: float, wait: float | None
) -> None:
    policy = RetryPolicy(3, 1.0, max_backoff_seconds=5.0, max_retry_after_seconds=cap)
    assert policy.next_delay(1, asked) == wait


# =========================================================================== retry-after


NOW = 1_735_689_600.0  # 2025-01-01T00:00:00Z


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        (None, None),
        ({}, None),
        ({"retry-after": "20"}, 20.0),
        ({"retry-after": " 1.5 "}, 1.5),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),
        ({"retry-after": "Wed, 01 Jan 2025 00:00:20 GMT"}, 20.0),
        ({"retry-after": "Wed, 01 Jan 2025 00:00:20 -0000"}, 20.0),
        ({"retry-after": "Tue, 31 Dec 2024 23:59:00 GMT"}, 0.0),  # past: now
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-5"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "1e9"}, None),
        ({"retry-after": "9" * 13}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "Mon, 99 Foo 2025 99:99:99 GMT"}, None),
    ],
)
def test_retry_after_reads_seconds_milliseconds_and_dates(
    headers: dict[str, str] | None, seconds: float | None
) -> None:
    assert retry_after(headers, now=lambda: NOW) == seconds


@given(
    st.datetimes(  # (HTTP dates have four-digit years)
        min_value=datetime.datetime(1000, 1, 1), timezones=st.just(datetime.timezone.utc)
    )
)
def test_any_http_date_is_the_seconds_until_then(when: datetime.datetime) -> None:
    header = email.utils.format_datetime(when.replace(microsecond=0), usegmt=True)
    expected = max(0.0, when.replace(microsecond=0).timestamp() - NOW)
    assert retry_after({"retry-after": header}, now=lambda: NOW) == expected


@given(st.text(max_size=40))
def test_no_header_value_breaks_it(value: str) -> None:
    got = retry_after({"retry-after": value, "retry-after-ms": value}, now=lambda: NOW)
    assert got is None or (got >= 0 and math.isfinite(got))


def test_the_http_date_is_read_against_the_clock_by_default() -> None:
    # (a date far ahead: whatever the clock says, a long wait)
    got = retry_after({"retry-after": "Fri, 01 Jan 2100 00:00:00 GMT"})
    assert got is not None and got > 365 * 24 * 3600


# =========================================================================== arguments, kinds


@pytest.mark.parametrize(
    ("raw", "kind"),
    [("null", "null"), ("true", "a boolean"), ("1.5", "a number"), ('"x"', "a string")],
)
def test_arguments_must_be_an_object(raw: str, kind: str) -> None:
    with pytest.raises(MalformedOutput, match=f"must be a JSON object, got {kind}"):
        decode_arguments(raw, "here")


def test_blank_arguments_mean_none() -> None:
    assert decode_arguments("  ", "here") == {}


@pytest.mark.parametrize(
    ("status", "kind"),
    [(None, "unknown"), (302, "unknown"), (403, "auth"), (404, "bad_request"), (503, "server")],
)
def test_kind_from_status(status: int | None, kind: str) -> None:
    assert kind_from_status(status) == kind


# =========================================================================== output


def test_the_instruction_is_the_system_prompt_or_ends_it() -> None:
    forecast = OutputSpec(name="Forecast", schema={"type": "object"})
    instruction = 'Answer with only a JSON value matching this JSON Schema: {"type":"object"}'
    assert output_system("", forecast) == instruction
    assert output_system("Be kind.", forecast) == f"Be kind.\n\n{instruction}"
    assert output_system("Be kind.", None) == "Be kind."
    assert output_system(None, None) is None


@pytest.mark.parametrize(
    ("name", "sent"),
    [
        ("Forecast", "Forecast"),
        ("list[Forecast]", "list_Forecast_"),
        ("dict[str, my-type]", "dict_str__my-type_"),
        ("x" * 100, "x" * 64),
        ("", "output"),
    ],
)
def test_the_schema_name_is_what_openai_accepts(name: str, sent: str) -> None:
    assert schema_name(OutputSpec(name=name)) == sent


# =========================================================================== packaging, docs


def test_import_agentloop_imports_no_provider_sdk() -> None:
    code = (
        "import sys, agentloop, agentloop.models\n"
        "sdks = [m for m in sys.modules if m.split('.')[0] in ('openai', 'anthropic', 'google')]\n"
        "assert not sdks, sdks\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_diff_names_provider_blocks() -> None:
    from replay._diff import _block

    assert _block(ProviderBlock("gemini", "thought_signature", {})) == "gemini thought_signature"


def test_the_providers_page_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    page = (ROOT / "docs" / "providers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 4
    for code in blocks:
        exec(compile(code, "docs/providers.md", "exec"), {})
    # (the offline arun session)
    assert capsys.readouterr().out == "Hello from an async client.\n"
