"""Images, audio and documents through the four adapters (DESIGN §25).

What the adapters share, checked on each of them with either client: a media block
of a user message or a tool result goes out as the provider's own part, exactly as
the API took it in a recorded request (pydantic-ai's ``test_multimodal_tool_returns``
cassettes: a PDF and two images, inline and by URL, returned by a tool, replayed
against the real APIs); a block the provider cannot take is a ``ModelError``
(``bad_request``, naming the message, the block's index and type) before anything
is sent; and an image the model makes (a Responses ``image_generation_call``, a
Gemini ``inline_data`` part) comes back as an ``ImageBlock`` and goes back the way
the provider wants it next turn.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import (
    MODEL_PROTOCOL_ERROR,
    AssistantMessage,
    AudioBlock,
    DocumentBlock,
    ImageBlock,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ProviderBlock,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agentloop.models import RetryPolicy
from tests.helpers import examples

from .serve import (
    KINDS,
    Adapter,
    Server,
    body,
    chunk_lines,
    data_sse,
    failure,
    final,
    make,
    outcome,
    read,
    replies,
)

ALL = pytest.mark.parametrize("kind", KINDS)

#: A plain text answer of each adapter's API (what the server says after the request).
TEXT = {
    "chat": "openai/chat_text.sse",
    "responses": "openai/responses_text.sse",
    "anthropic": "anthropic/text.sse",
    "gemini": "gemini/recorded/google-text.chunks.txt",
}

#: Recorded requests whose last turn is a tool result holding media (pydantic-ai).
MATRIX = "recorded/test_multimodal_tool_return_matrix[direct-binary-document-{}].yaml"
PDF_RESULT = {
    "chat": "openai/" + MATRIX.format("openai_chat"),
    "responses": "openai/" + MATRIX.format("openai_responses"),
    "anthropic": "anthropic/" + MATRIX.format("anthropic"),
    "gemini": "gemini/" + MATRIX.format("google_gemini3"),
}
IMAGES = "recorded/test_model_sees_multiple_images[{}].yaml"
IMAGES_RESULT = {
    "chat": "openai/" + IMAGES.format("openai_chat"),
    "responses": "openai/" + IMAGES.format("openai_responses"),
    "anthropic": "anthropic/" + IMAGES.format("anthropic"),
}
R_IMAGE = "openai/recorded/openai-image-generation-tool.1.chunks.txt"
G_IMAGE = "gemini/image_output.chunks.txt"

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)
PDF = b"%PDF-1.4\n%\xc3\xa4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt "


def recorded_request(path: str) -> dict[str, Any]:
    """The JSON body of the last request of a VCR cassette."""
    request = yaml.safe_load(read(path))["interactions"][-1]["request"]
    parsed: dict[str, Any] = request["parsed_body"]
    return parsed


def result_media(kind: str, sent: dict[str, Any]) -> list[dict[str, Any]]:
    """The media parts of the tool result a request ends with, as its API has them."""
    if kind == "chat":  # the tool message takes text: the media follow as a user message
        return [part for part in sent["messages"][-1]["content"] if part["type"] != "text"]
    if kind == "responses":
        output: list[dict[str, Any]] = sent["input"][-1]["output"]
        return output
    if kind == "anthropic":
        content: list[dict[str, Any]] = sent["messages"][-1]["content"][0]["content"]
        return content
    parts: list[dict[str, Any]] = sent["contents"][-1]["parts"][0]["functionResponse"]["parts"]
    return parts


def block_of(part: dict[str, Any]) -> Any:
    """The agentloop block a provider part was made of (the reverse of the adapters)."""
    kind = part.get("type")
    if kind == "image_url":
        return _from_url(ImageBlock, part["image_url"]["url"])
    if kind == "input_image":
        return _from_url(ImageBlock, part["image_url"])
    if kind == "file":
        return _from_url(DocumentBlock, part["file"]["file_data"], part["file"]["filename"])
    if kind == "input_file":
        return _from_url(DocumentBlock, part["file_data"], part["filename"])
    if kind in ("image", "document"):
        cls = ImageBlock if kind == "image" else DocumentBlock
        source = part["source"]
        if source["type"] == "url":
            return cls("image/png", url=source["url"])
        return cls(source["media_type"], data=base64.b64decode(source["data"]))
    blob = part.get("inline_data") or part["inlineData"]
    mime = blob.get("mime_type") or blob["mimeType"]
    cls = ImageBlock if mime.startswith("image/") else DocumentBlock
    return cls(mime, data=base64.urlsafe_b64decode(blob["data"]))


def _from_url(cls: Any, url: str, name: str | None = None) -> Any:
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        return cls(head[5:].split(";")[0], data=base64.b64decode(data), name=name)
    return cls("image/png", url=url, name=name)  # (both recorded URLs are PNG images)


def tool_request(*blocks: Any, name: str = "get_file") -> ModelRequest:
    """A request whose last message is the result of one call, holding ``blocks``."""
    return ModelRequest(
        "request-001",
        2,
        (
            UserMessage("u1", "Call the tool."),
            AssistantMessage("a1", (ToolCall("call-1", name, {}),)),
            ToolResultMessage("r1", "call-1", name, tuple(blocks)),
        ),
        (),
        None,
    )


def user_request(*blocks: Any) -> ModelRequest:
    return ModelRequest(
        "request-001", 1, (UserMessage("u1", (TextBlock("Look:"), *blocks)),), (), None
    )


# --------------------------------------------------------------------------- recorded


RECORDED = [
    pytest.param(kind, path, id=f"{kind}:{name}")
    for name, table in (("pdf", PDF_RESULT), ("images", IMAGES_RESULT))
    for kind, path in table.items()
]


@pytest.mark.parametrize(("kind", "path"), RECORDED)
def test_media_from_a_tool_go_out_as_the_api_took_them_in_a_recorded_request(
    kind: str, path: str, adapter: Adapter
) -> None:
    taken = result_media(kind, recorded_request(path))
    blocks = [block_of(part) for part in taken]
    assert {type(b) for b in blocks} <= {ImageBlock, DocumentBlock} and blocks
    model = adapter(body(TEXT[kind]))
    replies(model, tool_request(*blocks))
    assert result_media(kind, adapter.server.body()) == taken


def test_chat_sends_a_results_media_after_the_run_of_tool_messages() -> None:
    """Chat tool messages take text: the tool message says where the media went and
    one user message after the last tool message of the run holds them, in order."""
    server = Server(body(TEXT["chat"]))
    request = ModelRequest(
        "request-001",
        2,
        (
            UserMessage("u1", "Two charts."),
            AssistantMessage("a1", (ToolCall("c1", "chart", {}), ToolCall("c2", "chart", {}))),
            ToolResultMessage(
                "r1", "c1", "chart", (TextBlock("first"), ImageBlock("image/png", data=PNG))
            ),
            ToolResultMessage(
                "r2", "c2", "chart", (ImageBlock("image/png", url="https://x.test/2.png"),)
            ),
            UserMessage("u2", "Compare them."),
        ),
        (),
        None,
    )
    replies(make("chat", server), request)
    messages = server.body()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "user", "user"]
    assert messages[2]["content"] == (
        "first\n[the media of this result follow in a user message, tool call c1]"
    )
    assert messages[3]["content"] == (
        "\n[the media of this result follow in a user message, tool call c2]"
    )
    urls = [part["image_url"]["url"] for part in messages[4]["content"]]
    assert urls == [
        f"data:image/png;base64,{base64.b64encode(PNG).decode()}",
        "https://x.test/2.png",
    ]
    assert messages[5] == {"role": "user", "content": "Compare them."}


@ALL
def test_a_text_only_tool_result_in_parts_stays_text(kind: str, adapter: Adapter) -> None:
    model = adapter(body(TEXT[kind]))
    replies(model, tool_request(TextBlock("18°C "), TextBlock("and sunny")))
    sent = adapter.server.body()
    if kind == "chat":
        assert sent["messages"][-1] == {
            "role": "tool",
            "tool_call_id": "call-1",
            "content": "18°C and sunny",
        }
    elif kind == "responses":
        assert sent["input"][-1]["output"] == [
            {"type": "input_text", "text": "18°C "},
            {"type": "input_text", "text": "and sunny"},
        ]
    elif kind == "anthropic":
        assert sent["messages"][-1]["content"][0]["content"] == [
            {"type": "text", "text": "18°C "},
            {"type": "text", "text": "and sunny"},
        ]
    else:
        response = sent["contents"][-1]["parts"][0]["functionResponse"]
        assert response["response"] == {"result": "18°C and sunny"}
        assert "parts" not in response


# --------------------------------------------------------------------------- user content

B64_PNG = base64.b64encode(PNG).decode()
B64_PDF = base64.b64encode(PDF).decode()
B64_WAV = base64.b64encode(WAV).decode()


def g64(data: bytes) -> str:
    """Base64 as the Gemini SDK writes bytes: the URL-safe alphabet."""
    return base64.urlsafe_b64encode(data).decode()


PNG_URL = "https://example.com/chart.png"
PDF_URL = "https://example.com/paper.pdf"

#: What each block of a user message becomes on each adapter's wire: the part, or
#: ``str`` = the start of the ``ModelError`` raised before anything is sent.
MAPPED: list[tuple[str, Any, dict[str, Any]]] = [
    (
        "image bytes",
        ImageBlock("image/png", data=PNG),
        {
            "chat": {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}},
            "responses": {
                "type": "input_image",
                "image_url": f"data:image/png;base64,{B64_PNG}",
                "detail": "auto",
            },
            "anthropic": {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": B64_PNG},
            },
            "gemini": {"inlineData": {"data": g64(PNG), "mime_type": "image/png"}},
        },
    ),
    (
        "image URL",
        ImageBlock("image/png", url=PNG_URL),
        {
            "chat": {"type": "image_url", "image_url": {"url": PNG_URL}},
            "responses": {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
            "anthropic": {"type": "image", "source": {"type": "url", "url": PNG_URL}},
            "gemini": {"fileData": {"file_uri": PNG_URL, "mime_type": "image/png"}},
        },
    ),
    (
        "PDF bytes",
        DocumentBlock("application/pdf", data=PDF, name="paper.pdf"),
        {
            "chat": {
                "type": "file",
                "file": {
                    "file_data": f"data:application/pdf;base64,{B64_PDF}",
                    "filename": "paper.pdf",
                },
            },
            "responses": {
                "type": "input_file",
                "file_data": f"data:application/pdf;base64,{B64_PDF}",
                "filename": "paper.pdf",
            },
            "anthropic": {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": B64_PDF},
                "title": "paper.pdf",
            },
            "gemini": {"inlineData": {"data": g64(PDF), "mime_type": "application/pdf"}},
        },
    ),
    (
        "PDF URL",
        DocumentBlock("application/pdf", url=PDF_URL),
        {
            "chat": "messages[0] (user 'u1'): content[1] (DocumentBlock 'application/pdf', a URL): "
            "the openai adapter cannot send a document by URL",
            "responses": {"type": "input_file", "file_url": PDF_URL},
            "anthropic": {"type": "document", "source": {"type": "url", "url": PDF_URL}},
            "gemini": {"fileData": {"file_uri": PDF_URL, "mime_type": "application/pdf"}},
        },
    ),
    (
        "text document",
        DocumentBlock("text/plain; charset=utf-8", data="Grüße".encode()),
        {
            "chat": "messages[0] (user 'u1'): content[1] (DocumentBlock 'text/plain; "
            "charset=utf-8', inline bytes): the openai adapter cannot send a document other "
            "than a PDF",
            "responses": {
                "type": "input_file",
                "file_data": "data:text/plain; charset=utf-8;base64,"
                + base64.b64encode("Grüße".encode()).decode(),
                "filename": "document.txt",
            },
            "anthropic": {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "Grüße"},
            },
            "gemini": {
                "inlineData": {
                    "data": g64("Grüße".encode()),
                    "mime_type": "text/plain; charset=utf-8",
                }
            },
        },
    ),
    (
        "wav bytes",
        AudioBlock("audio/wav", data=WAV),
        {
            "chat": {"type": "input_audio", "input_audio": {"data": B64_WAV, "format": "wav"}},
            "responses": "messages[0] (user 'u1'): content[1] (AudioBlock 'audio/wav', inline "
            "bytes): the openai adapter cannot send audio (Responses input has no audio part)",
            "anthropic": "messages[0] (user 'u1'): content[1] (AudioBlock 'audio/wav', inline "
            "bytes): the anthropic adapter cannot send audio",
            "gemini": {"inlineData": {"data": g64(WAV), "mime_type": "audio/wav"}},
        },
    ),
    (
        "mp3 bytes",
        AudioBlock("audio/mpeg", data=b"ID3"),
        {
            "chat": {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}},
            "gemini": {"inlineData": {"data": g64(b"ID3"), "mime_type": "audio/mpeg"}},
        },
    ),
    (
        "ogg bytes",
        AudioBlock("audio/ogg", data=b"OggS"),
        {
            "chat": "messages[0] (user 'u1'): content[1] (AudioBlock 'audio/ogg', inline bytes): "
            "the openai adapter cannot send audio other than wav or mp3",
        },
    ),
    (
        "audio URL",
        AudioBlock("audio/wav", url="https://example.com/a.wav"),
        {
            "chat": "messages[0] (user 'u1'): content[1] (AudioBlock 'audio/wav', a URL): the "
            "openai adapter cannot send audio by URL",
            "gemini": {
                "fileData": {"file_uri": "https://example.com/a.wav", "mime_type": "audio/wav"}
            },
        },
    ),
    (
        "TIFF bytes",
        ImageBlock("image/tiff", data=b"II*\x00"),
        {
            "anthropic": "messages[0] (user 'u1'): content[1] (ImageBlock 'image/tiff', inline "
            "bytes): the anthropic adapter cannot send an image other than JPEG, PNG, GIF or WebP",
        },
    ),
    (
        "text not UTF-8",
        DocumentBlock("text/plain", data=b"\xff\xfe"),
        {
            "anthropic": "messages[0] (user 'u1'): content[1] (DocumentBlock 'text/plain', inline "
            "bytes): the anthropic adapter cannot send a text/plain document that is not UTF-8",
        },
    ),
    (
        "CSV bytes",
        DocumentBlock("text/csv", data=b"a,b\n1,2\n"),
        {
            "anthropic": "messages[0] (user 'u1'): content[1] (DocumentBlock 'text/csv', inline "
            "bytes): the anthropic adapter cannot send a document other than a PDF or text/plain",
            "responses": {
                "type": "input_file",
                "file_data": "data:text/csv;base64,YSxiCjEsMgo=",
                "filename": "document.csv",
            },
        },
    ),
]


def mapped_cases() -> list[Any]:
    return [
        pytest.param(kind, block, wire, id=f"{kind}:{name}")
        for name, block, table in MAPPED
        for kind, wire in table.items()
    ]


def user_part(kind: str, sent: dict[str, Any]) -> Any:
    """The second part of the request's first user message (the first is the text)."""
    if kind in ("chat", "anthropic"):
        return sent["messages"][0]["content"][1]
    if kind == "responses":
        return sent["input"][0]["content"][1]
    return sent["contents"][0]["parts"][1]


@pytest.mark.parametrize(("kind", "block", "wire"), mapped_cases())
def test_a_user_media_block_is_the_providers_part_or_refused_before_sending(
    kind: str, block: Any, wire: Any, asynchronous: bool
) -> None:
    adapter = Adapter(kind, asynchronous)
    model = adapter(body(TEXT[kind]))
    items, error = outcome(model, user_request(block))
    if isinstance(wire, str):
        assert items == [] and error is not None
        assert str(error.message).startswith(wire), error.message
        assert str(error.message).endswith("; nothing was sent")
        assert (error.kind, error.provider, error.status_code) == (
            "bad_request",
            adapter.provider,
            None,
        )
        assert adapter.server.requests == []  # refused before the SDK was called
        return
    assert error is None
    first = user_part(kind, adapter.server.body())
    assert first == wire


#: The adapters that refuse some block (Gemini takes every one).
REFUSING = pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])


@REFUSING
def test_a_refused_block_is_not_retried(kind: str, adapter: Adapter) -> None:
    """The refusal is a ``ModelError`` of kind ``bad_request``: no retry policy
    retries it (the run fails with ``MODEL_ERROR`` naming the block)."""
    model = adapter(retry=RetryPolicy(3, 0.0), sleep=adapter.sleeps())
    blocks = (TextBlock("hear this"), AudioBlock("audio/x-flac", url="https://a.test/x.flac"))
    request = ModelRequest("request-001", 1, (UserMessage("u1", blocks),), (), None)
    _, error = failure(model, request)
    assert "content[1] (AudioBlock 'audio/x-flac', a URL)" in error.message
    assert adapter.server.requests == []
    assert [(a.number, a.kind, a.retried) for a in model.attempts] == [(1, "bad_request", False)]


@REFUSING
def test_a_tool_results_media_is_refused_naming_the_tool_result(
    kind: str, adapter: Adapter
) -> None:
    model = adapter(body(TEXT[kind]))
    _, error = failure(
        model, tool_request(TextBlock("x"), AudioBlock("audio/flac", url="https://a.test/f"))
    )
    assert error.message.startswith(
        "messages[2] (tool_result 'r1'): content[1] (AudioBlock 'audio/flac', a URL)"
    )
    assert adapter.server.requests == []


@settings(max_examples=examples(25))
@given(
    st.lists(
        st.one_of(
            st.text(max_size=5).map(TextBlock),
            st.binary(max_size=8).map(lambda data: ImageBlock("image/png", data=data)),
            st.binary(max_size=8).map(lambda data: DocumentBlock("application/pdf", data=data)),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_parts_keep_their_order_and_bytes_on_every_adapter(parts: list[Any]) -> None:
    """Any mix of text, images and PDFs maps part for part, in order, bytes intact
    (read back from the wire with the inverse mapping of this file)."""
    for kind in KINDS:
        server = Server(body(TEXT[kind]))
        request = ModelRequest("request-001", 1, (UserMessage("u1", tuple(parts)),), (), None)
        replies(make(kind, server), request)
        sent = server.body()
        if kind in ("chat", "anthropic"):
            wire = sent["messages"][0]["content"]
        elif kind == "responses":
            wire = sent["input"][0]["content"]
        else:
            wire = sent["contents"][0]["parts"]
        assert [_back(part) for part in wire] == [_plain(part) for part in parts], kind


def _plain(part: Any) -> Any:
    if type(part) is TextBlock:
        return part.text
    return (part.media_type, part.data)


def _back(part: dict[str, Any]) -> Any:
    if part.get("type") in ("text", "input_text") or ("text" in part and len(part) == 1):
        return part["text"]
    block = block_of(part)
    return (block.media_type, block.data)


# --------------------------------------------------------------------------- model output


def repaired_image_generation() -> bytes:
    """The recorded image-generation stream with a valid image in place of its
    ``result`` (shortened upstream: not base64)."""
    lines = []
    for line in chunk_lines(R_IMAGE):
        event = json.loads(line)
        item = event.get("item") or {}
        if (
            event["type"] == "response.output_item.done"
            and item.get("type") == "image_generation_call"
        ):
            item["result"] = B64_PNG
            item["output_format"] = "png"
            line = json.dumps(event)
        lines.append(line)
    return data_sse(lines)


def test_responses_image_generation_is_an_image_block_then_its_item(asynchronous: bool) -> None:
    adapter = Adapter("responses", asynchronous)
    items = replies(adapter(repaired_image_generation()))
    response = final(items)
    image_id = "ig_0df93c0bb83a72f20068c979f589c0819e9f0fc2d1a27aa1b8"
    made = (
        ImageBlock("image/png", data=PNG),
        ProviderBlock("openai", "image_generation_call", {"id": image_id}),
    )
    assert [b for b in response.content if type(b) in (ImageBlock, ProviderBlock)][-2:] == list(
        made
    )
    streamed = [item.block for item in items if type(item) is ModelChunk]
    assert [b for b in streamed if type(b) is ImageBlock] == [made[0]]
    assert response.stop_reason == "stop"

    # Next turn: the image goes back inside its image_generation_call item.
    model = adapter(body(TEXT["responses"]))
    request = ModelRequest(
        "request-002",
        2,
        (
            UserMessage("u1", "Draw a dot."),
            AssistantMessage("a1", (*made, TextBlock("Here it is."))),
            UserMessage("u2", "Thanks"),
        ),
        (),
        None,
    )
    replies(model, request)
    sent = adapter.server.body()["input"]
    assert sent[1] == {
        "type": "image_generation_call",
        "id": image_id,
        "status": "completed",
        "result": B64_PNG,
    }
    assert sent[2] == {"type": "message", "role": "assistant", "content": "Here it is."}


def test_the_recorded_image_result_that_is_not_base64_is_a_protocol_failure() -> None:
    server = Server(body(R_IMAGE))
    items = replies(make("responses", server))
    last = items[-1]
    assert type(last) is ModelFailure and last.code == MODEL_PROTOCOL_ERROR
    assert last.message == (
        "openai response, output item 1: the image_generation_call result is not base64"
    )


def test_an_image_generation_call_without_a_result_is_not_an_image() -> None:
    lines = []
    for line in chunk_lines(R_IMAGE):
        event = json.loads(line)
        if event.get("item", {}).get("type") == "image_generation_call":
            event["item"].pop("result", None)
        lines.append(json.dumps(event))
    items = replies(make("responses", Server(data_sse(lines))))
    kinds = [type(b) for b in final(items).content]
    assert ImageBlock not in kinds and kinds[0] is ProviderBlock  # (the reasoning item)


def test_an_image_by_itself_or_of_another_provider_is_not_sent_to_responses() -> None:
    server = Server(body(TEXT["responses"]))
    request = ModelRequest(
        "request-002",
        2,
        (
            UserMessage("u1", "Draw."),
            AssistantMessage(
                "a1",
                (
                    ImageBlock("image/png", data=PNG),
                    TextBlock("Done."),
                    ProviderBlock("openai", "image_generation_call", {"id": "ig_1"}),
                ),
            ),
        ),
        (),
        None,
    )
    replies(make("responses", server), request)
    sent = server.body()["input"]
    assert sent[1] == {"type": "message", "role": "assistant", "content": "Done."}
    # (the image before the text was the item's; one of another kind is not resent)
    assert sent[2] == {
        "type": "image_generation_call",
        "id": "ig_1",
        "status": "completed",
        "result": B64_PNG,
    }


def test_gemini_image_output_is_an_image_block_and_goes_back_as_inline_data(
    asynchronous: bool,
) -> None:
    adapter = Adapter("gemini", asynchronous)
    items = replies(adapter(body(G_IMAGE)))
    response = final(items)
    assert response.content == (TextBlock("Here is a red dot:"), ImageBlock("image/png", data=PNG))
    streamed = [item.block for item in items if type(item) is ModelChunk]
    assert streamed == list(response.content)

    model = adapter(body(TEXT["gemini"]))
    request = ModelRequest(
        "request-002",
        2,
        (
            UserMessage("u1", "Draw."),
            AssistantMessage("a1", response.content),
            UserMessage("u2", "Bigger"),
        ),
        (),
        None,
    )
    replies(model, request)
    parts = adapter.server.body()["contents"][1]["parts"]
    assert parts == [
        {"text": "Here is a red dot:"},
        {"inlineData": {"data": g64(PNG), "mime_type": "image/png"}},
    ]


def test_gemini_thought_images_and_other_inline_data_are_not_image_blocks() -> None:
    line = {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {"inlineData": {"mimeType": "image/png", "data": B64_PNG}, "thought": True},
                        {"inlineData": {"mimeType": "audio/wav", "data": B64_WAV}},
                        {"text": "done"},
                    ],
                    "role": "model",
                },
                "finishReason": "STOP",
            }
        ],
        "responseId": "AgentloopGeminiThoughtImage",
    }
    items = replies(make("gemini", Server(data_sse([json.dumps(line)], crlf=True))))
    assert final(items).content == (TextBlock("done"),)


@pytest.mark.parametrize("kind", ["chat", "anthropic"])
def test_adapters_without_image_output_do_not_send_an_assistant_image_back(kind: str) -> None:
    server = Server(body(TEXT[kind]))
    request = ModelRequest(
        "request-002",
        2,
        (
            UserMessage("u1", "Draw."),
            AssistantMessage("a1", (ImageBlock("image/png", data=PNG), TextBlock("Done."))),
        ),
        (),
        None,
    )
    replies(make(kind, server), request)
    assistant = server.body()["messages"][1]
    expected = "Done." if kind == "chat" else [{"type": "text", "text": "Done."}]
    assert assistant == {"role": "assistant", "content": expected}


def test_gemini_sends_a_tool_results_media_by_url_as_file_data() -> None:
    server = Server(body(TEXT["gemini"]))
    image = ImageBlock("image/png", url="gs://bucket/chart.png")
    replies(make("gemini", server), tool_request(TextBlock("the chart"), image))
    response = server.body()["contents"][-1]["parts"][0]["functionResponse"]
    assert response["response"] == {"result": "the chart"}
    assert response["parts"] == [
        {"file_data": {"file_uri": "gs://bucket/chart.png", "mime_type": "image/png"}}
    ]


def test_an_image_generation_call_after_an_image_by_url_goes_back_without_a_result() -> None:
    server = Server(body(TEXT["responses"]))
    made = (
        ImageBlock("image/png", url="https://x.test/made.png"),
        ProviderBlock("openai", "image_generation_call", {"id": "ig_2"}),
    )
    request = ModelRequest(
        "request-002", 2, (UserMessage("u1", "Draw."), AssistantMessage("a1", made)), (), None
    )
    replies(make("responses", server), request)
    assert server.body()["input"][1] == {
        "type": "image_generation_call",
        "id": "ig_2",
        "status": "completed",
    }
