"""The provider adapters, through the real SDK clients, on recorded HTTP.

``serve.py`` serves the bodies of ``fixtures/providers/`` to the SDKs' own clients
(sync and async) on an ``httpx2.MockTransport``; ``test_conformance.py`` is the
contract every adapter keeps, parametrised over the four adapters and both
clients; ``test_openai.py``, ``test_anthropic.py`` and ``test_gemini.py`` hold
what only one provider has; ``test_clients.py`` what only the async clients have
(cancellation, whole ``arun`` sessions); ``test_common.py`` the shared machinery
(retry policy, argument decoding) on its own.
"""
