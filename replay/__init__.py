"""replay: read and write agentloop event logs, replay them without a model."""

__all__: list[str] = []
