"""Normalising a model's stream and its final content for comparison (DESIGN §8).

Adjacent text deltas of the stream and adjacent text blocks of the final message
are merged (tool calls and thinking blocks are boundaries); when anything was
streamed, the two merged sequences must be equal.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._json import json_equal
from ._messages import Block, ProviderBlock, TextBlock
from ._text import short

__all__ = ["normalize", "stream_mismatch"]


def normalize(content: Iterable[Block]) -> list[str | Block]:
    out: list[str | Block] = []
    parts: list[str] = []
    for block in content:
        if type(block) is TextBlock:
            if block.text:
                parts.append(block.text)
        else:
            if parts:
                out.append("".join(parts))
                parts = []
            out.append(block)
    if parts:
        out.append("".join(parts))
    return out


def stream_mismatch(streamed: list[str | Block], content: tuple[Block, ...]) -> str | None:
    """Compare the merged stream with the merged final content; describe the first difference."""
    final = normalize(content)
    for index, (got, want) in enumerate(zip(streamed, final, strict=False)):
        try:
            differ = got != want
        except RecursionError:
            differ = not _same_deep(got, want)
        if differ:
            return (
                f"streamed chunks disagree with the final response at normalized block {index}: "
                f"streamed {short(got)}, final {short(want)}"
            )
    if len(streamed) != len(final):
        return (
            f"streamed chunks make {len(streamed)} normalized blocks, "
            f"the final response {len(final)}"
        )
    return None


def _same_deep(got: str | Block, want: str | Block) -> bool:
    """``got == want`` where Python's ``==`` ran out of stack. Only a ProviderBlock's
    opaque data may nest that deep (tool arguments are capped by the limits, text
    is text): its data is compared without recursion."""
    return (
        type(got) is ProviderBlock
        and type(want) is ProviderBlock
        and got.provider == want.provider
        and got.kind == want.kind
        and json_equal(got.data, want.data)
    )
