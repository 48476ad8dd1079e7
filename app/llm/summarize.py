"""Session summaries: the prompt and the Gemini call that turns a session's compressed
observations into 3–4 sentences of flowing prose."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.llm.fallback import ObservationDigest
from app.llm.generation import Generation, generate_text
from app.privacy import cap_text, sanitize_text

if TYPE_CHECKING:
    from google import genai

SUMMARY_TEMPERATURE = 0.2
SUMMARY_MAX_OUTPUT_TOKENS = 300

SUMMARY_INSTRUCTIONS = """\
You summarise one working session of an AI coding agent for its future sessions.
Write 3 to 4 sentences of flowing prose, no lists and no headings: what the session set out to
do, what was done and learned (name the key files), what was decided or left unfinished, and
what the next session should know. Keep names, paths and numbers exact. Never repeat secrets."""


def session_text(
    *,
    project_path: str,
    user_prompt: str | None,
    observations: Sequence[ObservationDigest],
    max_chars: int,
) -> str:
    """The session as the model sees it: its prompt and each compressed observation in order."""
    lines = [f"Project: {project_path}"]
    if user_prompt:
        lines.append(f"User prompt: {user_prompt}")
    lines.append(f"Observations ({len(observations)}):")
    for number, item in enumerate(observations, start=1):
        body = item.compressed if item.compressed else f"{item.function_name} (not compressed)"
        if item.result_missing:
            body = f"(no result was recorded) {body}"
        lines.append(f"{number}. [{item.observation_type}] {body}")
    return cap_text(sanitize_text("\n".join(lines)), max_chars)


async def summarize_with_gemini(
    client: genai.Client, *, model: str, session: str, timeout_s: float
) -> Generation:
    """Ask Gemini for the session's summary, the whole answer within `timeout_s`; the text is
    redacted again on the way back."""
    answer = await generate_text(
        client,
        model=model,
        system=SUMMARY_INSTRUCTIONS,
        contents=session,
        temperature=SUMMARY_TEMPERATURE,
        max_output_tokens=SUMMARY_MAX_OUTPUT_TOKENS,
        timeout_s=timeout_s,
    )
    return Generation(
        text=sanitize_text(answer.text),
        prompt_tokens=answer.prompt_tokens,
        output_tokens=answer.output_tokens,
        thoughts_tokens=answer.thoughts_tokens,
    )
