"""What the model reads about the server and each tool: when to use it and what it returns."""

from __future__ import annotations

from app.errors import AnswerTooLarge, PayloadTooLarge
from app.memories.service import VersionConflict

# A stale if_version's error, by its wire name (a rename cannot leave the text behind).
_CONFLICT = VersionConflict.wire_name

INSTRUCTIONS = """\
antigravity-mem keeps memory for coding agents across sessions and between agents.
Start a session with smart_resume (a short briefing instead of re-reading transcripts).
Store durable facts with write_memory under these key namespaces:
  project.*    stable facts (project.framework, project.architecture, project.conventions)
  current.*    work in progress (current.task, current.progress, current.next, current.todos)
  discovered.* things learned while working (discovered.bugs, discovered.gotchas)
  shared.*     notes meant for other agents (shared.handoff, shared.api_contract)
  ai.<name>.*  one agent's own notes (ai.claude.preferences)
Use search_memory to find anything by meaning or words, and get_context for a ready-made
memory block about a task."""

_SCOPES = (
    "scope: 'project' (default; needs project_path), 'session' (needs session_id; invisible "
    "to other sessions), 'shared' (for other agents; with project_path it belongs to that "
    "project, without it to everyone) or 'global' (visible everywhere)."
)

# The largest answer of a tool without a budget (its memories or hits as JSON, by the app's
# token estimate): Claude Code's own cap on an MCP tool's output (MAX_MCP_OUTPUT_TOKENS).
MAX_ANSWER_TOKENS = 25_000
_ANSWER_CAP = (
    f"An answer over {MAX_ANSWER_TOKENS} tokens (as JSON) is refused with "
    f"{AnswerTooLarge.wire_name}, "
    "which says how to ask for less."
)

WRITE_MEMORY = f"""\
Save a value under a hierarchical key, e.g. key='current.task', value='auth refactoring'.
Writing an existing key updates it (version + 1) and keeps the previous value in its history.
value: any JSON (text, number, list, object). {_SCOPES}
value_is_json_text: true when value is the value's JSON text, as read_memory answers one it
flags valueIsJsonText (send it back so to keep it as it was; numbers are kept exactly).
project_path: absolute path of the project.
session_id: your session id (only with scope 'session'; an error otherwise).
ttl: seconds until the memory expires (omit to keep it; null removes expiry).
tags: labels to filter by later. created_by: your name, e.g. 'claude' or 'gemini'.
if_version: the version you last read; the write fails with {_CONFLICT} if someone changed
it since (0 means 'only create'). Returns {{created, memory}}.
The arguments together may be at most the server's request body limit (8 MiB by default);
more is refused with {PayloadTooLarge.wire_name}."""

READ_MEMORY = f"""\
Read one memory by exact key, e.g. 'project.architecture'. A key with '*' is a pattern
('project.*', '*.todos') and returns every visible match. Without scope, the most specific
visible memory wins (session, then project, then shared, then global). {_SCOPES}
Returns {{memory}} (null with a detail when there is none) or {{memories}} for a pattern.
{_ANSWER_CAP}"""

LIST_MEMORIES = f"""\
List visible memories sorted by key. pattern: '*' wildcards ('current.*', 'ai.claude.*').
tags: only memories carrying all of these tags. limit: at most this many (default 50).
Give project_path (and session_id) to see that project's (and session's) memories;
global memories are always visible. {_SCOPES} Returns {{memories, hasMore, nextCursor}}:
when hasMore, call again with cursor=nextCursor for the next page. {_ANSWER_CAP}"""

DELETE_MEMORY = f"""\
Delete the memory a read_memory of this key would return. {_SCOPES}
if_version: the version you last read; the delete fails with {_CONFLICT} if someone changed
it since. Returns {{deleted: true}} or {{deleted: false}} when there was nothing to delete."""

SMART_RESUME = """\
Call this first when you start or resume work on a project. Returns a short briefing (what
the project is, what is in progress, what is next), the project.*, current.* and shared.*
memories, and the last session's summary, all within budget tokens (default 500). Memories
that do not fit are left out and named at the end of the briefing: read them with read_memory
or give a larger budget."""

SEARCH_MEMORY = f"""\
Search everything remembered about a project - memory files, past session transcripts,
tool observations, session summaries and key/value memories - by meaning and by words
(hybrid search). query: what you are looking for, in plain words. project_path: limit to one
project. sources: any of memory, sessions, observation, summary, kv. mode: hybrid (default),
vector, keyword or weighted. Returns {{results: [{{source, score, content, path, startLine,
endLine, sessionId}}]}}, best first. {_ANSWER_CAP}"""

GET_CONTEXT = """\
Get a ready-to-read memory block for a project, relevant to prompt (your current task),
within budget tokens (default: the server's setting, 2000 unless configured): recent session
summaries and the best matching memories, with their sources. Returns {context (markdown),
tokenCount, budget}."""
