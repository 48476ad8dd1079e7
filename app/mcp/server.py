"""The MCP server: memory tools for agents, over streamable HTTP at `/mcp` (app/mcp/http.py)
and over stdio.

Every tool opens its own transaction on the app's database and calls the same services as the
HTTP API, so the two surfaces cannot drift. The HTTP endpoint is stateless (no MCP session kept
in memory), like the rest of the API: any number of API processes can answer it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, TypeVar, cast

import anyio
import psycopg
import structlog
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc

from app import exactjson
from app.api.bodies import unknown_fields_message
from app.api.errors import (
    UNREACHABLE_ERRORS,
    database_unavailable,
    describe_validation_errors,
    failed_inside,
    refused_value,
    unkept_json,
)
from app.api.numbers import ToolInt
from app.api.outage_log import OUTAGE_LOG
from app.config import Settings
from app.context.builder import build_context
from app.db.engine import transaction
from app.errors import (
    AnswerTooLarge,
    AppError,
    InvalidData,
    InvalidJSON,
    PayloadTooLarge,
    ValidationFailed,
)
from app.llm.embeddings import get_embedder
from app.mcp import descriptions as text
from app.mcp.stdio import FRAMING_SLACK_BYTES, Calls, client_lines
from app.mcp.wire import MESSAGE_TEXT, exact_arguments
from app.memories import reads, resume, service
from app.memories.paging import Cursor
from app.memories.patterns import is_pattern
from app.memories.schemas import (
    MemoryWrite,
    ResumeRequest,
    check_key,
    refuse_session_outside_its_scope,
    tag_filter,
)
from app.memories.schemas import Scope as MemoryScope
from app.privacy import clean_text
from app.projects import canonical_project
from app.search.schemas import SearchMode, SearchRequest, SearchSource
from app.search.service import SearchTuning, search
from app.state import AppState
from app.tokens import estimate_tokens

log = structlog.get_logger(__name__)

StateProvider = Callable[[], AppState]

# The arguments the call being served sent, as sent: the SDK gives an argument sent as null and
# one left out alike, as None, and parses a string argument that is JSON for one not typed str
# (so value's JSON text reached write_memory as the list it spells, its numbers floats). Those
# holding a non-integer number are read again from the message's text (`sent_arguments`).
_SENT: ContextVar[Mapping[str, Any]] = ContextVar("sent_arguments", default=MappingProxyType({}))

# A tool's answer lands in the model's context window: larger blocks than this would crowd it.
MAX_TOOL_BUDGET = 20_000

# How a tool without a budget gets a smaller answer than text.MAX_ANSWER_TOKENS: list_memories
# answered 0.9 MB into a model's context, read_memory a 20 MB value.
_UNBUDGETED = {
    "read_memory": "read that memory with `agmem memory get` or GET /api/memories/{key}",
    "list_memories": "narrow it with pattern, tags or a smaller limit",
    "search_memory": "ask for fewer results (limit)",
}


def tool_error_text(error: AppError) -> str:
    """A tool error's text: the error's name (its class, as HTTP names it) and its detail."""
    return f"{error.error}: {error.detail}"


def validation_failed(error: ValidationError) -> str:
    """`ValidationFailed: limit: must be a number, not a boolean`, worded as over HTTP, and
    `InvalidJSON: value: a number is …` for a number a write cannot keep, as HTTP names it."""
    errors = list(error.errors())
    unkept = next((item for item in errors if unkept_json(item)), None)
    if unkept is not None:
        return tool_error_text(InvalidJSON(describe_validation_errors([unkept])))
    return tool_error_text(ValidationFailed(describe_validation_errors(errors)))


@contextmanager
def tool_errors(state: StateProvider) -> Iterator[None]:
    """Our errors reach the model as a tool error with their type and detail, never a crash;
    a full or failing disk's refusal is kept for /health, as the HTTP API's is."""
    try:
        yield
    except AppError as error:
        raise ToolError(tool_error_text(error)) from None
    except ValidationError as error:
        raise ToolError(validation_failed(error)) from None
    except ValueError as error:
        raise ToolError(tool_error_text(ValidationFailed(str(error)))) from None
    except (sa_exc.DBAPIError, sa_exc.TimeoutError, psycopg.Error) as error:
        # A value Postgres refuses (too large to index, out of range) is the caller's to fix.
        refused = refused_value(error)
        if refused is not None:
            raise ToolError(tool_error_text(InvalidData(refused))) from None
        if isinstance(error, UNREACHABLE_ERRORS) or failed_inside(error):
            # As the HTTP API's 503: the tool said only "Error executing tool read_memory".
            refusal = database_unavailable(error)
            # Agents write through these tools: noted only by the HTTP handlers, a full disk
            # they met left /health "ok".
            state().storage_refusals.note_if_storage(error, str(refusal))
            raise ToolError(tool_error_text(refusal)) from None
        raise


class MemoryServer(MCPServer):
    """The SDK's server, refusing unknown arguments, and with a tool's refused arguments worded
    as a refusal in a tool is.

    The SDK validates arguments before the tool runs and answers pydantic's whole report (`1
    validation error for list_memoriesArguments`, the input, a URL); the model gets the same
    `ValidationFailed: <argument>: <reason>` a check inside the tool gives."""

    # Read from the tools' schemas at the first call: every tool is added by build_server.
    _arguments: dict[str, list[str]] | None = None
    # The HTTP API's body limit, which a call's arguments keep to over stdio too (over /mcp the
    # body already does); set by build_server. A 20 MB value was stored over stdio.
    argument_bytes: Callable[[], int] | None = None

    async def tool_arguments(self, name: str) -> list[str] | None:
        """The arguments tool `name` takes, in order (None for no such tool)."""
        if self._arguments is None:
            tools = await self.list_tools()
            self._arguments = {tool.name: list(tool.input_schema["properties"]) for tool in tools}
        return self._arguments.get(name)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        # The SDK drops arguments a tool does not take: `tag` for `tags` stored an untagged memory.
        known = await self.tool_arguments(name)
        unknown = [arg for arg in arguments if arg not in known] if known is not None else []
        if known is not None and unknown:
            problem = unknown_fields_message(unknown, known, noun="argument")
            refused = tool_error_text(ValidationFailed(problem))
            raise ToolError(f"Error executing tool {name}: {refused}")
        if self.argument_bytes is not None:
            check_argument_size(name, arguments, self.argument_bytes())
        request_id = context.request_context.request_id if context is not None else None
        sent = _SENT.set(MappingProxyType(sent_arguments(name, arguments, request_id)))
        try:
            result = await cancelled_once(super().call_tool(name, arguments, context))
            check_answer_size(name, arguments, result)
            return result
        except ToolError as error:
            cause = error.__cause__
            if not isinstance(cause, ValidationError) or isinstance(error, UnexpectedToolError):
                raise
            # The cause stays: the SDK logs the refused arguments' names from it.
            raise ToolError(f"Error executing tool {name}: {validation_failed(cause)}") from cause
        finally:
            _SENT.reset(sent)

    async def run_stdio_async(self) -> None:
        # The SDK's, with stdin read by our daemon thread (app/mcp/stdio.py): a SIGTERM waited
        # for the client to close the pipe. stdout is still the SDK's.
        try:
            await self._serve_stdio()
        except* BrokenPipeError:
            # Its client is gone (it died, or closed its end): nobody is left to answer. The
            # SDK's writer raised it out of its task group, exit 1 with a traceback.
            log.warning("mcp.stdio.client_gone", detail="the client closed its end of stdout")

    async def _serve_stdio(self) -> None:
        # Its calls are counted, so that the end of the input lets those read be answered.
        calls = Calls()
        arguments = self.argument_bytes() if self.argument_bytes is not None else None
        if arguments is None:  # build_server sets it; the setting's default otherwise
            arguments = int(Settings.model_fields["max_body_bytes"].default)
        limit = arguments + FRAMING_SLACK_BYTES
        async with client_lines(calls, limit) as lines:
            # The SDK only iterates `stdin`, one line at a time.
            async with stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (read, write):
                server = self._lowlevel_server
                options = server.create_initialization_options()
                await server.run(calls.requests(read), calls.answers(write), options)


def sent_arguments(name: str, arguments: dict[str, Any], request_id: Any | None) -> dict[str, Any]:
    """`arguments`, or, when they hold a float, the same call's arguments read again from the
    message's text with `exactjson` (the SDK's floats stored `1e-400` as 0.0 and `1.50` as 1.5,
    where a PUT keeps them). Only a call that holds a float pays for the second parse.

    A call with no text (a client in the same process, no transport) keeps its floats: they are
    the client's own. One whose message holds no `tools/call` of its id and name is refused
    rather than stored with floats that may not be what was sent; neither transport lets one
    through (each sets the text of the message it serves, the SDK refuses batches, and an id
    of 1.0 makes a notification, not a call)."""
    text = MESSAGE_TEXT.get()
    if request_id is None or text is None or not exactjson.has_float(arguments):
        return dict(arguments)
    exact = exact_arguments(text, request_id, name)
    if exact is None:
        unread = InvalidJSON(
            "the call's numbers could not be read as sent (no tools/call of its id in the "
            "message), and its floats may not be them; send the value as JSON text with "
            "value_is_json_text"
        )
        raise ToolError(f"Error executing tool {name}: {tool_error_text(unread)}")
    return exact


def value_as_sent(value: Any, sent: Any, value_is_json_text: bool | None) -> Any:
    """`write_memory`'s value as the client sent it, numbers as written (`sent_arguments`):
    with the flag its text, which MemoryWrite parses exactly; 1e-400 is no 0.0 either way."""
    if value_is_json_text:
        return sent
    if isinstance(sent, str) and not isinstance(value, str):
        # The SDK parsed a string that reads as a JSON array or object (its `pre_parse_json`):
        # parsed here too, exactly, whether or not it holds a float. The string as sent stored
        # `"[1.5]"` as a string where `"[1]"` was stored as [1].
        try:
            return exactjson.loads(sent)
        except (ValueError, RecursionError):
            return value
    return sent if exactjson.has_float(value) else value


T = TypeVar("T")

# How long a cancelled call is let cancel its query on the server (psycopg waits up to 5 s).
CANCEL_WAIT_SECONDS = 5.0


async def cancelled_once(work: Coroutine[Any, Any, T]) -> T:
    """`work` in a task of its own, which a cancellation of the caller cancels once.

    The SDK cancels the calls still running when it ends (0.5 s after SIGTERM) through an anyio
    cancel scope, which cancels every later await too: psycopg, cancelling the query on the
    server, was cancelled again, logged "query cancellation interrupted (CancelledError):
    closing connection" and dropped the connection mid-query (~3 of 16 SIGTERMs during a flood
    of calls). Cancelled once, the query is cancelled on the server and the connection kept."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_WAIT_SECONDS):
            await asyncio.wait([task])
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the call's own end is of no interest once cancelled
        raise


def check_argument_size(name: str, arguments: dict[str, Any], limit: int) -> None:
    """Refuse a call whose arguments, as JSON, are over `limit` bytes, as HTTP's 413 does."""
    size = len(json.dumps(arguments, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > limit:
        too_large = PayloadTooLarge(
            f"the arguments are {size} bytes of JSON, over the limit of {limit} bytes "
            "(AGMEM_MAX_BODY_BYTES)"
        )
        raise ToolError(f"Error executing tool {name}: {tool_error_text(too_large)}")


def check_answer_size(
    name: str, arguments: dict[str, Any], result: CallToolResult | InputRequiredResult
) -> None:
    """Refuse an answer of a tool without a budget that is over text.MAX_ANSWER_TOKENS, saying
    how to get a smaller one."""
    hint = _UNBUDGETED.get(name)
    if hint is None or not isinstance(result, CallToolResult) or result.is_error:
        return
    tokens = estimate_tokens(json.dumps(result.structured_content, ensure_ascii=False))
    if tokens > text.MAX_ANSWER_TOKENS:
        if name == "read_memory" and not is_pattern(str(arguments.get("key"))):
            hint = hint.replace("{key}", str(arguments.get("key")))
        elif name == "read_memory":
            hint = "use list_memories with a narrower pattern, tags or a limit"
        else:
            hint += f" (the first {_items_that_fit(result.structured_content)} would fit)"
        too_large = AnswerTooLarge(
            f"the answer is about {tokens} tokens, over the {text.MAX_ANSWER_TOKENS} a tool "
            f"answers into a model's context; {hint}"
        )
        raise ToolError(f"Error executing tool {name}: {tool_error_text(too_large)}")


def _items_that_fit(answer: dict[str, Any] | None) -> int:
    """How many of a listing's items (`memories`, `results`), first to last, fit the cap."""
    answer = answer or {}
    items = next((value for value in answer.values() if isinstance(value, list)), [])
    envelope = {key: [] if value is items else value for key, value in answer.items()}
    room = text.MAX_ANSWER_TOKENS - estimate_tokens(json.dumps(envelope, ensure_ascii=False))
    fitting = 0
    for item in items:
        room -= estimate_tokens(json.dumps(item, ensure_ascii=False)) + 1
        if room < 0:
            break
        fitting += 1
    return fitting


def build_server(state: StateProvider, *, default_project: str | None = None) -> MCPServer:
    """The memory tools, bound to the database of `state()` at call time."""
    mcp = MemoryServer(
        name="antigravity-mem",
        instructions=text.INSTRUCTIONS,
        version="0.1.0",
        log_level="WARNING",
    )
    mcp.argument_bytes = lambda: state().settings.max_body_bytes

    def project(project_path: str | None) -> str | None:
        chosen = project_path or default_project
        return canonical_project(chosen) if chosen else None

    def visibility(
        scope: MemoryScope | None, project_path: str | None, session_id: str | None
    ) -> service.Visibility:
        return service.Visibility(
            scope=scope, project_path=project(project_path), session_id=session_id or None
        )

    @mcp.tool(description=text.WRITE_MEMORY)
    async def write_memory(
        key: str,
        value: Any,
        scope: MemoryScope = "project",
        project_path: str | None = None,
        session_id: str | None = None,
        ttl: ToolInt | None = None,
        tags: list[str] | None = None,
        created_by: str | None = None,
        if_version: ToolInt | None = None,
        value_is_json_text: bool | None = None,
    ) -> dict[str, Any]:
        with tool_errors(state):
            refuse_session_outside_its_scope(scope, session_id, "session_id")
            fields: dict[str, Any] = {
                "value": value_as_sent(value, _SENT.get().get("value", value), value_is_json_text),
                "scope": scope,
            }
            if value_is_json_text is not None:
                fields["value_is_json_text"] = value_is_json_text
            optional = {
                "project_path": project(project_path),
                "session_id": session_id,
                "ttl": ttl,
                "tags": tags,
                "created_by": created_by,
            }
            fields |= {name: v for name, v in optional.items() if v is not None}
            # A ttl or tags sent as null clears them, as in a PUT's body (left out, they are kept).
            cleared = {"ttl", "tags"} & _SENT.get().keys()
            fields |= {name: None for name in cleared if name not in fields}
            data = MemoryWrite.model_validate(fields)
            async with transaction(state().sessionmaker) as session:
                row, created = await service.write_memory(
                    session,
                    key=check_key(key),
                    data=data,
                    settings=state().settings,
                    if_version=if_version,
                )
                memory = service.to_schema(row).model_dump(mode="json", by_alias=True)
        return {"created": created, "memory": memory}

    @mcp.tool(description=text.READ_MEMORY)
    async def read_memory(
        key: str,
        scope: MemoryScope | None = None,
        project_path: str | None = None,
        session_id: str | None = None,
    ) -> dict[str, Any]:
        with tool_errors(state):
            seen_by = visibility(scope, project_path, session_id)
            current = state()
            if is_pattern(key):
                await reads.flush_reads(current)
                async with transaction(current.sessionmaker) as session:
                    rows = await service.find_memories(session, visibility=seen_by, pattern=key)
                return {"memories": [_dump(row) for row in rows]}
            try:
                row = await reads.read_memory(current, key=check_key(key), visibility=seen_by)
            except service.MemoryNotFound as missing:
                return {"memory": None, "detail": missing.detail}
            return {"memory": _dump(row)}

    @mcp.tool(description=text.LIST_MEMORIES)
    async def list_memories(
        scope: MemoryScope | None = None,
        pattern: str | None = None,
        tags: list[str] | None = None,
        limit: ToolInt = 50,
        project_path: str | None = None,
        session_id: str | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        with tool_errors(state):
            if not 1 <= limit <= service.MAX_LIST_LIMIT:
                raise ValueError(f"limit must be between 1 and {service.MAX_LIST_LIMIT}")
            after = Cursor.decode(cursor) if cursor else None
            seen_by = visibility(scope, project_path, session_id)
            current = state()
            await reads.flush_reads(current)
            async with transaction(current.sessionmaker) as session:
                page = await service.find_memory_page(
                    session,
                    visibility=seen_by,
                    pattern=pattern or None,
                    tags=tag_filter(tags),
                    limit=limit,
                    after=after,
                )
                following = page.next_cursor
                return {
                    "memories": [_dump(row) for row in page.rows],
                    "hasMore": following is not None,
                    "nextCursor": following.encode() if following is not None else None,
                }

    @mcp.tool(description=text.DELETE_MEMORY)
    async def delete_memory(
        key: str,
        scope: MemoryScope | None = None,
        project_path: str | None = None,
        session_id: str | None = None,
        if_version: ToolInt | None = None,
    ) -> dict[str, Any]:
        with tool_errors(state):
            seen_by = visibility(scope, project_path, session_id)
            async with transaction(state().sessionmaker) as session:
                deleted = await service.delete_memory(
                    session, key=check_key(key), visibility=seen_by, if_version=if_version
                )
        return {"deleted": deleted}

    @mcp.tool(description=text.SMART_RESUME)
    async def smart_resume(
        project_path: str | None = None, session_id: str | None = None, budget: ToolInt = 500
    ) -> dict[str, Any]:
        with tool_errors(state):
            request = ResumeRequest(
                project_path=project(project_path), session_id=session_id, budget=budget
            )
            current = state()
            await reads.flush_reads(current)
            async with transaction(current.sessionmaker) as session:
                answer = await resume.smart_resume(
                    session,
                    settings=current.settings,
                    project_path=request.project_path,
                    session_id=request.session_id,
                    budget=request.budget,
                    gate=current.gemini_gate,
                    gemini=current.briefing_client,
                )
        answered = answer.model_dump(mode="json", by_alias=True)
        for memories in answered["context"].values():
            memories[:] = [_answerable(memory) for memory in memories]
        return answered

    @mcp.tool(description=text.SEARCH_MEMORY)
    async def search_memory(
        query: str,
        project_path: str | None = None,
        limit: ToolInt = 10,
        mode: SearchMode = "hybrid",
        sources: list[SearchSource] | None = None,
    ) -> dict[str, Any]:
        with tool_errors(state):
            request = SearchRequest(
                query=query,
                project_path=project(project_path),
                limit=limit,
                mode=mode,
                sources=sources,
            )
            current = state()
            async with transaction(current.sessionmaker) as session:
                found = await search(
                    session,
                    request=request,
                    embedder=get_embedder(current.settings),
                    tuning=SearchTuning.from_settings(current.settings),
                )
        keep = {"source", "score", "content", "path", "startLine", "endLine", "sessionId"}
        results = [
            {k: v for k, v in hit.model_dump(mode="json", by_alias=True).items() if k in keep}
            for hit in found.results
        ]
        return {"results": results}

    @mcp.tool(description=text.GET_CONTEXT)
    async def get_context(
        project_path: str | None = None, prompt: str | None = None, budget: ToolInt | None = None
    ) -> dict[str, Any]:
        with tool_errors(state):
            chosen = project(project_path)
            if not chosen:
                raise ValueError("project_path is required (the absolute project path)")
            if budget is not None and not 50 <= budget <= MAX_TOOL_BUDGET:
                raise ValueError(f"budget must be between 50 and {MAX_TOOL_BUDGET} tokens")
            current = state()
            # The same block GET /api/context builds: its default budget and session count.
            budget = budget or min(current.settings.context_budget, MAX_TOOL_BUDGET)
            async with transaction(current.sessionmaker) as session:
                block = await build_context(
                    session,
                    project_path=chosen,
                    prompt=clean_text(prompt) if prompt else None,
                    budget=budget,
                    embedder=get_embedder(current.settings),
                    tuning=SearchTuning.from_settings(current.settings),
                    max_sessions=current.settings.context_sessions,
                    min_similarity=current.settings.context_min_similarity,
                )
        return {"context": block.markdown, "tokenCount": block.token_count, "budget": budget}

    return mcp


def _dump(row: Any) -> dict[str, Any]:
    return _answerable(service.to_schema(row).model_dump(mode="json", by_alias=True))


def _answerable(memory: dict[str, Any]) -> dict[str, Any]:
    """A memory as a tool can answer it: a value holding an integer of more than 4,300 digits
    (stored by SQL or an older build) given as its exact JSON text, `valueIsJsonText` saying so.
    The SDK writes answers with `json`, which refuses such an integer: the tool answered only
    Python's message, and one such memory broke every listing holding it."""
    return exactjson.flag_json_text(memory, "value", long_ints=True)


async def serve_stdio(state: AppState, *, default_project: str | None) -> None:
    """Serve the tools over stdin/stdout (for `agmem mcp`) until the client closes the pipe."""
    server = build_server(lambda: state, default_project=default_project)
    OUTAGE_LOG.window = state.settings.refusal_log_seconds
    log.info("mcp.stdio.started", project=default_project)
    try:
        await server.run_stdio_async()
    finally:
        # As the HTTP app's stop: the count of the failures in the last window, else lost.
        OUTAGE_LOG.flush()
