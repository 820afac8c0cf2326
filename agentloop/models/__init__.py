"""Provider adapters: real models behind the :class:`~agentloop.Model` protocol.

Each adapter lives in its own module so that importing ``agentloop`` (or this
package) never imports a provider SDK:

- ``agentloop.models.openai``: :class:`OpenAIChatModel` (Chat Completions) and
  :class:`OpenAIResponsesModel` (Responses); ``pip install 'agentloop-replay[openai]'``.
- ``agentloop.models.anthropic``: :class:`AnthropicModel` (Messages);
  ``pip install 'agentloop-replay[anthropic]'``.
- ``agentloop.models.gemini``: :class:`GeminiModel` (Gemini, ``google-genai``);
  ``pip install 'agentloop-replay[gemini]'``.

Importing one of them without its SDK raises ``ImportError`` naming the extra.
Each adapter takes the SDK's sync client (it then serves ``run``/``drive``) or its
async client (``arun``/``adrive``): ``docs/providers.md``, "Async clients".
:class:`RetryPolicy` and :class:`RetryAttempt` (shared by all adapters) and
:class:`FallbackModel` (any models, in order) are here; :func:`model_from_spec`
builds an adapter from ``"openai:<model>"``-style strings. What each adapter maps
and drops: ``docs/providers.md``.
"""

from ._cli import ModelSpecError, model_from_spec
from ._common import RetryAttempt, RetryPolicy
from ._fallback import FallbackModel

__all__ = ["FallbackModel", "ModelSpecError", "RetryAttempt", "RetryPolicy", "model_from_spec"]
