"""Tools from MCP servers: each tool a server lists becomes a ``ToolRegistry`` entry.

Install with ``pip install 'agentloop-replay[mcp]'`` (the ``mcp`` SDK, 2.x). ``import
agentloop`` never imports it; only this module does.

Two shapes over one async core:

- :class:`MCPToolset` (sync, for :func:`agentloop.run`): a context manager that runs
  the MCP client session on a background event-loop thread and exposes the server's
  tools as :class:`MCPTool` entries whose ``execute`` blocks until the server
  answers::

      with MCPToolset(StdioServer("python", ["server.py"])) as server:
          result = run(messages, model=model, tools=server.tools)

- :class:`AsyncMCPToolset` (async, for an asyncio driver): the same session as an
  ``async with`` context manager; ``await toolset.call(name, arguments)`` and
  :meth:`MCPTool.aexecute` run a call on the caller's event loop.

Servers: :class:`StdioServer` starts a process and talks over its stdin/stdout;
:class:`HTTPServer` (or a URL string) connects over streamable HTTP; an un-entered
``mcp.Client`` is used as given (any transport, authentication, an in-process
server).

Mapping
-------
A tool's spec is its MCP name (with an optional ``prefix``; characters outside
``A-Z a-z 0-9 _ -`` become ``_``, at most 64 characters), its description (or title)
and its ``inputSchema`` as the parameters schema. A call's result becomes the
``(content, is_error)`` pair a :class:`~agentloop.ToolResult` carries
(:func:`tool_result`): text blocks as they are, joined by newlines; an embedded
text resource as ``[resource <uri>]`` and its text; a resource link as
``[resource link: <uri>]``. An image or audio block becomes an
:class:`~agentloop.ImageBlock` / :class:`~agentloop.AudioBlock` (its bytes, its MIME
type), an embedded binary resource an ``ImageBlock``, ``AudioBlock`` or
:class:`~agentloop.DocumentBlock` by its MIME type (named by its URI): the content
is then a tuple of parts (text runs as ``TextBlock``), which the adapters send as
each provider's own parts (DESIGN §25). A result of text only stays a ``str``.
Bytes that are not base64 become a text placeholder naming the block
(``[image: image/png, not base64, not shown]``), never a guess. When the result has
no content blocks, its ``structuredContent`` is the content, as compact JSON
(servers that return structured content also send it as text, which is what the
model reads).

Resources: :meth:`MCPToolset.read_resource` (``await``
:meth:`AsyncMCPToolset.read_resource``) reads a resource by URI into parts: text
contents as a ``TextBlock``, binary contents as a block chosen by MIME type (as
above), ready to put in a :class:`~agentloop.UserMessage`.
``isError`` is ``is_error``. A call that fails before the server answers (a
protocol error, a closed connection, a timeout) is an error result
``MCP error: ...``: tool errors are results the model can read, never exceptions out
of the run.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import re
import sys
import threading
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, TextIO

import msgspec

from ._errors import AgentLoopError
from ._messages import (
    AudioBlock,
    Content,
    DocumentBlock,
    ImageBlock,
    Part,
    TextBlock,
    ToolCall,
    content_text,
)
from ._tools import Tool, ToolRegistry
from ._toolspec import ToolSpec

try:
    import httpx2
    import mcp
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import (
        AudioContent,
        BlobResourceContents,
        CallToolResult,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )
except ImportError as _exc:  # tested in a subprocess that hides the SDK
    raise ImportError(
        "agentloop.mcp needs the MCP SDK (2.x): pip install 'agentloop-replay[mcp]'"
    ) from _exc

__all__ = [
    "AsyncMCPToolset",
    "HTTPServer",
    "MCPTool",
    "MCPToolError",
    "MCPToolset",
    "StdioServer",
    "tool_result",
]

_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_MAX_PAGES: Final = 1000  # tools/list pages followed before giving up on a server
# Per-call read timeout that means "as long as it takes" (the SDK falls back to the
# session's connect timeout when given None).
_NO_CALL_TIMEOUT: Final = 365 * 24 * 3600.0


class MCPToolError(AgentLoopError):
    """Raised by calling an :class:`MCPTool` directly when the server reports an error."""


@dataclass(frozen=True)
class StdioServer:
    """An MCP server started as a process, spoken to over its stdin and stdout.

    Attributes:
        command: the executable.
        args: its arguments.
        env: extra environment variables, merged over the MCP SDK's safe default
            environment (``HOME``, ``PATH``, ...; the rest of yours is not passed on).
        cwd: the working directory.
        stderr: where the server's stderr goes (default: this process's stderr).
    """

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    stderr: TextIO | None = field(default=None, compare=False)


@dataclass(frozen=True)
class HTTPServer:
    """An MCP server reached over streamable HTTP at ``url`` (e.g. ``.../mcp``).

    Attributes:
        url: the endpoint.
        headers: sent with every request (e.g. ``{"Authorization": "Bearer ..."}``).
    """

    url: str
    headers: Mapping[str, str] | None = None


Server = StdioServer | HTTPServer | str | mcp.Client


class MCPTool(Tool):
    """A tool of an MCP server, as a registry entry.

    ``spec`` comes from the server's listing; :meth:`execute` (what
    :func:`agentloop.run` calls) and :meth:`aexecute` call the server and return
    ``(content, is_error)``. Calling the tool directly (``tool(a=1)``) returns the
    content, or raises :class:`MCPToolError` with it when the server says the call
    failed.

    Attributes:
        mcp_name: the tool's name on the server (``spec.name`` may differ: prefix,
            characters providers do not accept).
    """

    __slots__ = ("_acall", "_call", "mcp_name")

    def __init__(
        self,
        spec: ToolSpec,
        mcp_name: str,
        call: Callable[[str, dict[str, Any]], tuple[Content, bool]],
        acall: Callable[[str, dict[str, Any]], Coroutine[Any, Any, tuple[Content, bool]]],
    ) -> None:
        # No Tool.__init__: the schema comes from the server, not a signature.
        self.spec = spec
        self.mcp_name = mcp_name
        self._call = call
        self._acall = acall
        self.fn = self._direct

    def _direct(self, **arguments: Any) -> Content:
        content, is_error = self._call(self.spec.name, arguments)
        if is_error:
            raise MCPToolError(content_text(content))
        return content

    # (``tuple[Any, bool]``: the content is a ``str`` or a tuple of parts, see
    # :func:`tool_result`)
    def execute(self, call: ToolCall) -> tuple[Any, bool]:
        """Call the server with ``call.arguments``; ``(content, is_error)``."""
        return self._call(self.spec.name, call.arguments)

    async def aexecute(self, call: ToolCall) -> tuple[Any, bool]:
        """:meth:`execute` for async drivers: awaits the server on the running loop."""
        return await self._acall(self.spec.name, call.arguments)

    def __repr__(self) -> str:
        return f"<MCPTool {self.spec.name!r} -> {self.mcp_name!r}>"


class AsyncMCPToolset:
    """One MCP client session, as an async context manager (the async core).

    On entering, it connects, lists the server's tools (every page) and builds
    their specs; :meth:`call` runs a tool. Use it on one event loop (the one that
    entered it).

    Args:
        server: a :class:`StdioServer`, an :class:`HTTPServer`, a URL string
            (streamable HTTP), or an un-entered ``mcp.Client``.
        prefix: put before every tool name (e.g. ``"fs_"``), to keep the tools of
            several servers apart.
        tools: expose only these tools (MCP names); default: all.
        requires_approval: ``True`` (every tool), or the MCP names of the tools
            whose calls pause for approval (``Pause(reason="approval")``).
        connect_timeout: seconds to wait for the handshake and each listing page.
        call_timeout: seconds to wait for one tool call (``None``: no limit); a
            call that takes longer is an error result.

    Raises:
        ValueError: two tools get the same name, or ``tools`` / ``requires_approval``
            name a tool the server does not list (on entering).
        TypeError: ``server`` is none of the accepted kinds.
    """

    def __init__(
        self,
        server: Server,
        *,
        prefix: str = "",
        tools: Collection[str] | None = None,
        requires_approval: bool | Collection[str] = False,
        connect_timeout: float = 30.0,
        call_timeout: float | None = None,
    ) -> None:
        if not isinstance(server, (StdioServer, HTTPServer, str, mcp.Client)):
            raise TypeError(
                f"server must be a StdioServer, an HTTPServer, a URL or an mcp.Client, "
                f"got {server!r}"
            )
        if type(prefix) is not str:
            raise TypeError(f"prefix must be a str, got {prefix!r}")
        if isinstance(tools, str):
            raise TypeError(f"tools must be a collection of tool names, got {tools!r}")
        if isinstance(requires_approval, str):
            raise TypeError(
                f"requires_approval must be a bool or a collection of tool names, "
                f"got {requires_approval!r}"
            )
        self.server = server
        self._prefix = prefix
        self._only = None if tools is None else frozenset(tools)
        self._approval = requires_approval
        self._connect_timeout = connect_timeout
        self._call_timeout = _NO_CALL_TIMEOUT if call_timeout is None else call_timeout
        self._stack: AsyncExitStack | None = None
        self._client: mcp.Client | None = None
        self._names: dict[str, str] = {}  # spec name -> MCP name
        self.specs: tuple[ToolSpec, ...] = ()
        self.instructions: str | None = None

    async def __aenter__(self) -> AsyncMCPToolset:
        if self._stack is not None:
            raise RuntimeError("this toolset is already open")
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(await self._connect(stack))
            listed: list[Any] = []
            cursor: str | None = None
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                listed.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            opened = stack.pop_all()
        # Refusals are raised here, outside the SDK's task groups, so they surface
        # as themselves (not wrapped in an exception group).
        try:
            if cursor is not None:
                raise ValueError(
                    f"the MCP server's tool listing did not end after {_MAX_PAGES} pages"
                )
            self.specs, self._names = self._specs(listed)
        except BaseException:
            await opened.aclose()
            raise
        self.instructions = client.instructions
        self._client = client
        self._stack = opened
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def _connect(self, stack: AsyncExitStack) -> mcp.Client:
        server = self.server
        if isinstance(server, mcp.Client):
            return server
        timeout = self._connect_timeout
        if isinstance(server, StdioServer):
            parameters = StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=None if server.env is None else dict(server.env),
                cwd=server.cwd,
            )
            errlog = sys.stderr if server.stderr is None else server.stderr
            return mcp.Client(stdio_client(parameters, errlog=errlog), read_timeout_seconds=timeout)
        if isinstance(server, str):
            server = HTTPServer(server)
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(server.headers or {}),
                timeout=httpx2.Timeout(timeout, read=max(timeout, 300.0)),
            )
        )
        transport = streamable_http_client(server.url, http_client=http)
        return mcp.Client(transport, read_timeout_seconds=timeout)

    def _specs(self, listed: Sequence[Any]) -> tuple[tuple[ToolSpec, ...], dict[str, str]]:
        available = {tool.name for tool in listed}
        wanted = available if self._only is None else self._only
        approval = self._approval
        if approval is True:
            approve = frozenset(available)
        elif approval is False:
            approve = frozenset()
        else:
            approve = frozenset(approval)
        for label, chosen in (("tools", wanted), ("requires_approval", approve)):
            unknown = sorted(set(chosen) - available)
            if unknown:
                raise ValueError(
                    f"{label} names tools the MCP server does not list: {', '.join(unknown)} "
                    f"(it lists: {', '.join(sorted(available)) or 'nothing'})"
                )
        specs: list[ToolSpec] = []
        names: dict[str, str] = {}
        for tool in listed:
            if tool.name not in wanted:
                continue
            name = _INVALID_NAME_CHARS.sub("_", self._prefix + tool.name)[:64]
            if name in names:
                raise ValueError(
                    f"MCP tools {names[name]!r} and {tool.name!r} both become {name!r}; "
                    f"pass tools=[...] to choose"
                )
            names[name] = tool.name
            specs.append(
                ToolSpec(
                    name=name,
                    description=tool.description or tool.title or "",
                    parameters=tool.input_schema,
                    requires_approval=tool.name in approve,
                )
            )
        return tuple(specs), names

    async def read_resource(self, uri: str) -> tuple[Part, ...]:
        """Read the resource ``uri`` from the server, as parts (see the module docs).

        Raises:
            MCPToolError: the connection is closed, or the server could not read it.
        """
        client = self._client
        if client is None:
            raise MCPToolError(f"cannot read {uri!r}: the connection to the server is closed")
        try:
            result = await client.read_resource(uri)
        except Exception as exc:
            raise MCPToolError(f"cannot read {uri!r}: {type(exc).__name__}: {exc}") from exc
        parts: list[Part] = []
        for contents in result.contents:
            if isinstance(contents, BlobResourceContents):
                _add(parts, _media("resource", contents.mime_type, contents.blob, contents.uri))
            else:
                parts.append(TextBlock(contents.text))
        return tuple(parts)

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[Content, bool]:
        """Call the tool whose spec is named ``name``; ``(content, is_error)``.

        Never raises for what the server or the connection does: those are error
        results (``MCP error: ...``). Cancelling the awaiting task cancels the call.
        """
        client = self._client
        mcp_name = self._names.get(name)
        if client is None:
            return "MCP error: the connection to the server is closed", True
        if mcp_name is None:
            return f"MCP error: no tool {name!r} on this server", True
        try:
            result = await client.call_tool(
                mcp_name, arguments, read_timeout_seconds=self._call_timeout
            )
        except Exception as exc:
            return f"MCP error: {type(exc).__name__}: {exc}", True
        return tool_result(result)

    @property
    def tools(self) -> ToolRegistry:
        """The tools as a registry, for async drivers (:meth:`MCPTool.aexecute`).

        Their synchronous ``execute`` cannot wait on this event loop from inside it:
        with :func:`agentloop.run`, use :class:`MCPToolset`.
        """
        return ToolRegistry(
            MCPTool(spec, self._names[spec.name], self._sync_refused, self.call)
            for spec in self.specs
        )

    @staticmethod
    def _sync_refused(name: str, arguments: dict[str, Any]) -> tuple[Content, bool]:
        return (
            "MCP error: this tool belongs to an AsyncMCPToolset; call it with an async "
            "driver, or use MCPToolset with agentloop.run",
            True,
        )


class MCPToolset:
    """An MCP server's tools for sync code: a context manager around :class:`AsyncMCPToolset`.

    Entering starts an event loop on a background thread (named ``agentloop-mcp``),
    opens the session there and waits for the tool listing; :attr:`tools` are then
    ready for ``run(..., tools=...)``. Each tool call blocks the calling thread until
    the server answers (calls from several threads may run at once). Leaving
    closes the session (a stdio server process is stopped) and the thread.

    The arguments are :class:`AsyncMCPToolset`'s.

    Raises:
        Whatever connecting raised (the server could not start, refused the
        handshake, a listing problem), on entering.
    """

    def __init__(self, server: Server, **options: Any) -> None:
        self._toolset = AsyncMCPToolset(server, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._main: concurrent.futures.Future[None] | None = None
        self._stop = asyncio.Event()  # bound to the background loop on first use
        self._registry = ToolRegistry()

    @property
    def server(self) -> Server:
        return self._toolset.server

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """The tool specs (empty until entered)."""
        return self._toolset.specs

    @property
    def tools(self) -> ToolRegistry:
        """The server's tools, ready for ``run(..., tools=...)`` (a fresh copy)."""
        return ToolRegistry(self._registry)

    def __enter__(self) -> MCPToolset:
        if self._loop is not None:
            raise RuntimeError("this toolset is already open")
        loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        thread = threading.Thread(target=loop.run_forever, name="agentloop-mcp", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        opened: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._main = asyncio.run_coroutine_threadsafe(self._serve(opened), loop)
        try:
            opened.result()
        except BaseException:
            self._close()
            raise
        toolset = self._toolset
        self._registry = ToolRegistry(
            MCPTool(spec, toolset._names[spec.name], self.call, self._acall)
            for spec in toolset.specs
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close()

    async def _serve(self, opened: concurrent.futures.Future[None]) -> None:
        """The session's task: open, report, wait for the stop, close (one task, so
        the SDK's task groups are entered and left in the same task)."""
        try:
            async with self._toolset:
                opened.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if opened.done():
                raise
            opened.set_exception(exc)

    def _close(self) -> None:
        loop, thread, main = self._loop, self._thread, self._main
        if loop is None or thread is None or main is None:
            return
        loop.call_soon_threadsafe(self._stop.set)
        try:
            main.result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            self._loop = self._thread = self._main = None
            self._registry = ToolRegistry()

    def _submit(
        self, name: str, arguments: dict[str, Any]
    ) -> concurrent.futures.Future[tuple[Content, bool]] | tuple[Content, bool]:
        """Schedule the call on the session's loop, or say why it cannot run."""
        refused = self._refused()
        if refused is not None:
            return f"MCP error: {refused}", True
        return asyncio.run_coroutine_threadsafe(self._toolset.call(name, arguments), self._loop)  # type: ignore[arg-type]

    def _refused(self) -> str | None:
        """Why a blocking call cannot run now (``None``: it can)."""
        if self._loop is None:
            return "the connection to the server is closed"
        if threading.current_thread() is self._thread:
            return "a blocking MCP call from the toolset's own event loop"
        return None

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[Content, bool]:
        """Call the tool whose spec is named ``name``, blocking; ``(content, is_error)``."""
        future = self._submit(name, arguments)
        return future if isinstance(future, tuple) else future.result()

    def read_resource(self, uri: str) -> tuple[Part, ...]:
        """Read the resource ``uri``, blocking; parts (:meth:`AsyncMCPToolset.read_resource`).

        Raises:
            MCPToolError: the toolset is closed, the call comes from its own event
                loop, or the server could not read the resource.
        """
        refused = self._refused()
        if refused is not None:
            raise MCPToolError(f"cannot read {uri!r}: {refused}")
        read = self._toolset.read_resource(uri)
        return asyncio.run_coroutine_threadsafe(read, self._loop).result()  # type: ignore[arg-type]

    async def _acall(self, name: str, arguments: dict[str, Any]) -> tuple[Content, bool]:
        future = self._submit(name, arguments)
        return future if isinstance(future, tuple) else await asyncio.wrap_future(future)

    def __repr__(self) -> str:
        state = "open" if self._loop is not None else "closed"
        return f"<MCPToolset {self.server!r} {state}, {len(self._registry)} tools>"


# --------------------------------------------------------------------------- results


def tool_result(result: CallToolResult) -> tuple[Content, bool]:
    """An MCP ``CallToolResult`` as ``(content, is_error)`` (see the module docs):
    a ``str`` when every block is text, else a tuple of parts."""
    parts: list[Part] = []
    for block in result.content:
        if isinstance(block, TextContent):
            _text(parts, block.text)
        elif isinstance(block, (ImageContent, AudioContent)):
            part = _media(block.type, block.mime_type, block.data)
            _add(parts, part)
        elif isinstance(block, ResourceLink):
            _text(parts, f"[resource link: {block.uri}]")
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                _text(parts, f"[resource {resource.uri}]\n{resource.text}")
            else:
                label = f"resource {resource.uri}"
                part = _media(label, resource.mime_type, resource.blob, resource.uri)
                _add(parts, part)
        else:  # a content type newer than this module
            _text(parts, f"[{getattr(block, 'type', 'unknown')} content, not shown]")
    content: Content
    if len(parts) == 1 and type(parts[0]) is TextBlock:
        content = parts[0].text
    elif parts:
        content = tuple(parts)
    elif result.structured_content is not None:
        content = msgspec.json.encode(result.structured_content).decode()
    else:
        content = ""
    return content, bool(result.is_error)


def _add(parts: list[Part], part: Part | str) -> None:
    if isinstance(part, str):
        _text(parts, part)
    else:
        parts.append(part)


def _text(parts: list[Part], text: str) -> None:
    """Add ``text`` to ``parts``: joined to the text before it by a newline."""
    last = parts[-1] if parts else None
    if type(last) is TextBlock:
        parts[-1] = TextBlock(f"{last.text}\n{text}")
    else:
        parts.append(TextBlock(text))


def _media(kind: str, mime_type: str | None, data: str, uri: Any = None) -> Part | str:
    """Base64 ``data`` as the block its MIME type says (a document when it says
    neither image nor audio); a placeholder when ``data`` is not base64."""
    mime = mime_type or "application/octet-stream"
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return f"[{kind}: {mime}, not base64, not shown]"
    name = None if uri is None else str(uri)
    major = mime.split("/", 1)[0].strip().lower()
    if major == "image":
        return ImageBlock(mime, data=raw, name=name)
    if major == "audio":
        return AudioBlock(mime, data=raw, name=name)
    return DocumentBlock(mime, data=raw, name=name)
