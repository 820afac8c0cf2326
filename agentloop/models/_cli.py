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
from typing import Final

from .._driver import Model

__all__ = ["SPEC_PROVIDERS", "ModelSpecError", "model_from_spec"]

#: provider prefix -> (adapter, extra to install, environment variable with the key)
SPEC_PROVIDERS: Final = {
    "openai": ("OpenAIChatModel", "openai", "OPENAI_API_KEY"),
    "openai-responses": ("OpenAIResponsesModel", "openai", "OPENAI_API_KEY"),
    "anthropic": ("AnthropicModel", "anthropic", "ANTHROPIC_API_KEY"),
}


class ModelSpecError(ValueError):
    """The spec is malformed, or its SDK or API key is missing.

    The message is a complete sentence for the user, e.g. ``install the OpenAI SDK
    to use --model openai:gpt-4.1-mini: pip install 'agentloop-replay[openai]'``.
    """


def model_from_spec(spec: str, *, environ: Mapping[str, str] | None = None) -> Model:
    """Build the adapter a ``<provider>:<model>`` spec names.

    Providers: ``openai`` (Chat Completions), ``openai-responses`` (Responses API),
    ``anthropic`` (Messages). The key is read from ``OPENAI_API_KEY`` or
    ``ANTHROPIC_API_KEY``; other client settings (``OPENAI_BASE_URL``, ...) are read
    by the SDK as usual.

    Args:
        spec: e.g. ``"openai:gpt-4.1-mini"`` or ``"anthropic:claude-sonnet-4-5"``.
        environ: where to read the key (default ``os.environ``).

    Raises:
        ModelSpecError: unknown provider, no model name, SDK not installed, or no
            API key in the environment.
    """
    env = os.environ if environ is None else environ
    provider, sep, name = spec.partition(":")
    provider = provider.strip().lower()
    name = name.strip()
    choices = ", ".join(f"{p}:<model>" for p in SPEC_PROVIDERS)
    if not sep or provider not in SPEC_PROVIDERS:
        raise ModelSpecError(f"unknown model {spec!r}; use one of: {choices}")
    if not name:
        raise ModelSpecError(f"model {spec!r} names no model; use {provider}:<model>")
    adapter_name, extra, key_name = SPEC_PROVIDERS[provider]
    sdk = "OpenAI" if extra == "openai" else "Anthropic"
    try:
        client_module = importlib.import_module(extra)
        adapters = importlib.import_module(f".{extra}", __package__)
    except ImportError:
        raise ModelSpecError(
            f"install the {sdk} SDK to use --model {spec}: pip install 'agentloop-replay[{extra}]'"
        ) from None
    key = env.get(key_name, "").strip()
    if not key:
        raise ModelSpecError(_missing_key(key_name, spec))
    client = getattr(client_module, sdk)(api_key=key)  # openai.OpenAI / anthropic.Anthropic
    adapter: Model = getattr(adapters, adapter_name)(client, name)
    return adapter


def _missing_key(key_name: str, spec: str) -> str:
    return f"set {key_name} in the environment to use --model {spec} (export {key_name}=...)"
