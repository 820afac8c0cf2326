"""PLACEHOLDER (owned by the replay helper): encode_event, decode_event."""

from __future__ import annotations

__all__: list[str] = []
