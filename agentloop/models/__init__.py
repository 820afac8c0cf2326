"""Provider adapters: real models behind the :class:`~agentloop.Model` protocol.

Each adapter lives in its own module so that importing ``agentloop`` (or this
package) never imports a provider SDK:

- ``agentloop.models.openai``: :class:`OpenAIChatModel` (Chat Completions) and
  :class:`OpenAIResponsesModel` (Responses); ``pip install 'agentloop-replay[openai]'``.
- ``agentloop.models.anthropic``: :class:`AnthropicModel` (Messages);
  ``pip install 'agentloop-replay[anthropic]'``.

Importing one of them without its SDK raises ``ImportError`` naming the extra.
:class:`RetryPolicy` and :class:`RetryAttempt` (shared by all adapters) are here;
:func:`model_from_spec` builds an adapter from ``"openai:<model>"``-style strings.
"""

from ._cli import ModelSpecError, model_from_spec
from ._common import RetryAttempt, RetryPolicy

__all__ = ["ModelSpecError", "RetryAttempt", "RetryPolicy", "model_from_spec"]
