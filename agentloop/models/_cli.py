"""Build a model adapter from a command-line spec such as ``openai:gpt-4.1-mini``.

Used by ``python -m agentloop demo --model ...``. The API key comes from the
environment; when the SDK or the key is missing, :class:`ModelSpecError` says
exactly what to install or set, in a message meant to be shown as is::

    try:
        model = model_from_spec(args.model)
    except ModelSpecError as exc:
        raise SystemExit(f"error: {exc}") from None
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Final, NamedTuple

from .._driver import Model
from .._errors import AgentLoopError

__all__ = ["SPEC_PROVIDERS", "ModelSpecError", "model_from_spec"]


class _Provider(NamedTuple):
    adapter: str  # class in agentloop.models.<module>
    module: str  # adapter module, also the extra to install
    sdk: str  # the SDK's name, for messages
    sdk_module: str  # what to import
    keys: tuple[str, ...]  # environment variables holding the key, first set wins
    key_required: bool = True


#: provider prefix -> how to build its adapter.
SPEC_PROVIDERS: Final = {
    "openai": _Provider("OpenAIChatModel", "openai", "OpenAI", "openai", ("OPENAI_API_KEY",)),
    "openai-responses": _Provider(
        "OpenAIResponsesModel", "openai", "OpenAI", "openai", ("OPENAI_API_KEY",)
    ),
    # <model>@<base_url>: any server speaking Chat Completions (Ollama, vLLM, ...).
    "openai-compatible": _Provider(
        "OpenAIChatModel",
        "openai",
        "OpenAI",
        "openai",
        ("OPENAI_COMPATIBLE_API_KEY", "OPENAI_API_KEY"),
        key_required=False,
    ),
    "anthropic": _Provider(
        "AnthropicModel", "anthropic", "Anthropic", "anthropic", ("ANTHROPIC_API_KEY",)
    ),
    "gemini": _Provider(
        "GeminiModel",
        "gemini",
        "google-genai",
        "google.genai",
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    ),
}

_FORMS: Final = {"openai-compatible": "openai-compatible:<model>@<base_url>"}

#: What a key-less local server gets (the OpenAI SDK insists on some key).
_NO_KEY: Final = "unused"


class ModelSpecError(AgentLoopError, ValueError):
    """The spec is malformed, or its SDK or API key is missing.

    The message is a complete sentence for the user, e.g. ``install the OpenAI SDK
    to use --model openai:gpt-4.1-mini: pip install 'agentloop-replay[openai]'``.
    """


def model_from_spec(spec: str, *, environ: Mapping[str, str] | None = None) -> Model:
    """Build the adapter a ``<provider>:<model>`` spec names.

    Providers: ``openai`` (Chat Completions), ``openai-responses`` (Responses API),
    ``anthropic`` (Messages), ``gemini`` (``google-genai``), and
    ``openai-compatible:<model>@<base_url>`` for any server that speaks Chat
    Completions (``openai-compatible:llama3.2@http://localhost:11434/v1`` for
    Ollama; the key, if the server wants one, from ``OPENAI_COMPATIBLE_API_KEY``
    or ``OPENAI_API_KEY``). Keys are read from ``OPENAI_API_KEY``,
    ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``); other client
    settings (``OPENAI_BASE_URL``, ...) are read by the SDK as usual.

    Args:
        spec: e.g. ``"openai:gpt-4.1-mini"`` or ``"anthropic:claude-sonnet-4-5"``.
        environ: where to read the key (default ``os.environ``).

    Raises:
        ModelSpecError: unknown provider, no model name (or base URL), SDK not
            installed, or no API key in the environment.
    """
    env = os.environ if environ is None else environ
    prefix, sep, name = spec.partition(":")
    prefix = prefix.strip().lower()
    name = name.strip()
    forms = ", ".join(_FORMS.get(p, f"{p}:<model>") for p in SPEC_PROVIDERS)
    if not sep or prefix not in SPEC_PROVIDERS:
        raise ModelSpecError(f"unknown model {spec!r}; use one of: {forms}")
    form = _FORMS.get(prefix, f"{prefix}:<model>")
    base_url = None
    if prefix in _FORMS:
        name, _, base_url = name.partition("@")
        name, base_url = name.strip(), base_url.strip()
        if not base_url:
            raise ModelSpecError(f"model {spec!r} names no base URL; use {form}")
    if not name:
        raise ModelSpecError(f"model {spec!r} names no model; use {form}")
    provider = SPEC_PROVIDERS[prefix]
    try:
        sdk = importlib.import_module(provider.sdk_module)
        adapters = importlib.import_module(f".{provider.module}", __package__)
    except ImportError:
        raise ModelSpecError(
            f"install the {provider.sdk} SDK to use --model {spec}: "
            f"pip install 'agentloop-replay[{provider.module}]'"
        ) from None
    key = next((k for k in (env.get(n, "").strip() for n in provider.keys) if k), "")
    if not key and provider.key_required:
        raise ModelSpecError(_missing_key(provider.keys[0], spec))
    if provider.module == "gemini":
        client = sdk.Client(api_key=key)
    elif base_url is not None:
        client = sdk.OpenAI(api_key=key or _NO_KEY, base_url=base_url)
    else:  # openai.OpenAI / anthropic.Anthropic
        client = getattr(sdk, provider.sdk)(api_key=key)
    adapter: Model = getattr(adapters, provider.adapter)(client, name)
    return adapter


def _missing_key(key_name: str, spec: str) -> str:
    return f"set {key_name} in the environment to use --model {spec} (export {key_name}=...)"
