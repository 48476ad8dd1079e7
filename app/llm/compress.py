"""Observation compression: the prompt, the text we send, and the Gemini call that turns one raw
tool call into a few structured lines."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.llm.generation import generate_text
from app.privacy import cap_text, sanitize_text
from app.tokens import estimate_tokens

if TYPE_CHECKING:
    from google import genai

COMPRESSION_TEMPERATURE = 0.2
COMPRESSION_MAX_OUTPUT_TOKENS = 200

COMPRESSION_INSTRUCTIONS = """\
You compress one tool call made by an AI coding agent into a memory the agent can recall later.
Write under 100 words of structured text, using only these labelled lines:
Learned: what was learned from this call.
Changed: what changed, naming files and line numbers when known.
Why: why it matters for the work in progress.
Concepts: related concepts, comma-separated.
Leave out a line that does not apply. Keep names, paths, numbers and error messages exact.
Never repeat secrets or credentials. No preamble, no markdown fences."""


@dataclass(frozen=True, slots=True)
class Compressed:
    text: str
    original_tokens: int
    compressed_tokens: int
    generated_by: str
    input_tokens: int  # what the call cost, for the daily budget (0 without a call)
    output_tokens: int

    @property
    def tokens_saved(self) -> int:
        return max(0, self.original_tokens - self.compressed_tokens)


def _render(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True)


# In place of the result of a call whose result never came: the model describes the call and
# does not guess how it went.
MISSING_RESULT = "(no result was recorded for this call: its outcome is unknown, do not guess it)"


def observation_text(
    *,
    function_name: str,
    observation_type: str,
    args: Any,
    result: Any,
    max_chars: int,
    result_missing: bool = False,
) -> str:
    """The observation as one text, cleaned and redacted again (a guard: capture already did)
    and capped so that one huge result cannot spend the budget."""
    shown = MISSING_RESULT if result_missing else _render(result)
    raw = (
        f"Tool: {function_name}\nType: {observation_type}\n"
        f"Arguments:\n{_render(args)}\nResult:\n{shown}"
    )
    return cap_text(sanitize_text(raw), max_chars)


async def compress_with_gemini(
    client: genai.Client, *, model: str, observation: str, timeout_s: float
) -> Compressed:
    """Compress one observation text with Gemini, the whole answer within `timeout_s`; token
    counts prefer Gemini's usageMetadata."""
    answer = await generate_text(
        client,
        model=model,
        system=COMPRESSION_INSTRUCTIONS,
        contents=observation,
        temperature=COMPRESSION_TEMPERATURE,
        max_output_tokens=COMPRESSION_MAX_OUTPUT_TOKENS,
        timeout_s=timeout_s,
    )
    text = sanitize_text(answer.text)
    instructions = estimate_tokens(COMPRESSION_INSTRUCTIONS)
    # promptTokenCount covers the instructions too; the observation's share is the rest.
    if answer.prompt_tokens is not None:
        original = max(1, answer.prompt_tokens - instructions)
    else:
        original = estimate_tokens(observation)
    compressed = answer.output_tokens if answer.output_tokens else estimate_tokens(text)
    return Compressed(
        text=text,
        original_tokens=original,
        compressed_tokens=compressed,
        generated_by=f"gemini:{model}",
        input_tokens=answer.prompt_tokens or instructions + estimate_tokens(observation),
        output_tokens=answer.billed_output(compressed),
    )


def compressed_locally(text: str, *, observation: str, generated_by: str) -> Compressed:
    """Token accounting for text produced without a model call (extractive or raw)."""
    return Compressed(
        text=text,
        original_tokens=estimate_tokens(observation),
        compressed_tokens=estimate_tokens(text),
        generated_by=generated_by,
        input_tokens=0,
        output_tokens=0,
    )
