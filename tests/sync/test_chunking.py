from __future__ import annotations

import pytest

from app.sync.chunking import Chunk, chunk_markdown, chunk_transcript
from app.sync.transcripts import parse_transcript
from app.tokens import estimate_tokens
from tests.sync.helpers import TESTDATA


def assert_lines_exact(text: str, chunks: list[Chunk]) -> None:
    """Each chunk's text is exactly what its line range holds (bar splits inside a line)."""
    lines = text.replace("\r\n", "\n").split("\n")
    for chunk in chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines)
        span = "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        content = chunk.content
        opener, _, rest = content.partition("\n")
        if opener.lstrip().startswith(("```", "~~~")) and content not in span:
            # A chunk starting inside a code block longer than a chunk reopens it: that line
            # is the block's opening fence, above the chunk.
            assert opener in lines[: chunk.start_line - 1], (chunk.start_line, chunk.end_line)
            content = rest
        assert content in span, (chunk.start_line, chunk.end_line)
        first, last = content.split("\n")[0], content.split("\n")[-1]
        assert first in lines[chunk.start_line - 1]
        assert last in lines[chunk.end_line - 1]


def test_real_memory_files_with_code_blocks_and_tables() -> None:
    for name in (
        "entireio-cli_CLAUDE.md",
        "VibeCodingTracker_CLAUDE.md",
        "claude-code-viewer_CLAUDE.md",
        "nftbk_memory-bank_progress.md",
    ):
        text = (TESTDATA / "memory-md" / name).read_text(encoding="utf-8")
        chunks = chunk_markdown(text, tokens=400, overlap=80)
        assert len(chunks) > 1, name
        # The size bound, give or take the header lines moved onto a section.
        assert all(len(c.content) <= 1600 + 300 for c in chunks), name
        assert_lines_exact(text, chunks)
        # The whole file is covered: no line of content falls between chunks.
        covered = set()
        for c in chunks:
            covered.update(range(c.start_line, c.end_line + 1))
        lines = text.split("\n")
        assert all(i + 1 in covered for i, line in enumerate(lines) if line.strip()), name


def test_headers_start_sections() -> None:
    text = "# Title\n\nintro\n\n" + "".join(
        f"## Section {n}\n\n" + ("word " * 150 + "\n") * 2 + "\n" for n in range(4)
    )
    chunks = chunk_markdown(text, tokens=100, overlap=0)
    # A header is never cut off from its section: no chunk ends on a header line, and every
    # section after the first small one starts a chunk.
    assert not any(c.content.split("\n")[-1].startswith("#") for c in chunks)
    starts = [c.content.split("\n")[0] for c in chunks]
    for n in range(1, 4):
        assert f"## Section {n}" in starts
    assert_lines_exact(text, chunks)


def test_code_block_and_table_kept_with_exact_lines() -> None:
    table = "| a | b |\n|---|---|\n" + "".join(f"| {i} | {i * i} |\n" for i in range(20))
    code = "```python\n" + "".join(f"def f{i}():\n    return {i}\n" for i in range(30)) + "```\n"
    text = f"# Doc\n\n{table}\n## Code\n\n{code}\nafter\n"
    chunks = chunk_markdown(text, tokens=60, overlap=10)
    assert_lines_exact(text, chunks)
    code_line = text.split("\n").index("def f29():") + 1
    holder = [c for c in chunks if "def f29():" in c.content]
    assert holder
    assert holder[0].start_line <= code_line <= holder[0].end_line


def test_very_long_line_is_split_within_that_line() -> None:
    long_line = " ".join(f"token{i}" for i in range(3000))
    text = f"# Top\n\nshort\n\n{long_line}\n\n## End\n\nbye\n"
    chunks = chunk_markdown(text, tokens=100, overlap=20)
    pieces = [c for c in chunks if "token" in c.content]
    assert len(pieces) > 5
    assert all((c.start_line, c.end_line) == (5, 5) for c in pieces)
    assert_lines_exact(text, chunks)
    assert chunks[-1].content == "## End\n\nbye"
    assert (chunks[-1].start_line, chunks[-1].end_line) == (7, 9)


def test_crlf_endings_keep_line_numbers_and_lose_the_cr() -> None:
    text = "# A\r\n\r\nfirst para\r\n\r\n## B\r\n\r\n" + "line\r\n" * 400 + "end\r\n"
    chunks = chunk_markdown(text, tokens=100, overlap=0)
    assert all("\r" not in c.content for c in chunks)
    assert_lines_exact(text, chunks)
    assert chunks[-1].end_line == text.count("\r\n")


def test_a_lone_cr_in_an_lf_file_is_no_line_end() -> None:
    # A progress line's lone CR was taken for a line end: every later citation was one line
    # past the line `grep -n` and editors show (`#L1-L5` for a 4-line file).
    text = "# T\n\nprogress 50%\r100%\nthe capybara line\n"
    [chunk] = chunk_markdown(text)
    assert (chunk.start_line, chunk.end_line) == (1, 4)
    text = "# A\r\n\r\n" + "step 1%\r2%\r3%\r\n" * 300 + "the last line\r\n"
    chunks = chunk_markdown(text, tokens=100, overlap=0)
    assert_lines_exact(text, chunks)
    assert chunks[-1].end_line == text.count("\n")


def test_transcript_chunks_map_to_jsonl_lines() -> None:
    data = (TESTDATA / "claude-code" / "entire_28a8bc758709_summaries_progress.jsonl").read_text()
    transcript = parse_transcript(data)
    chunks = chunk_transcript(transcript, tokens=120, overlap=20)
    entry_lines = sorted({e.line for e in transcript.entries})
    assert chunks[0].start_line == entry_lines[0] == 1
    assert chunks[-1].end_line == entry_lines[-1]
    for chunk in chunks:
        assert chunk.start_line in entry_lines
        assert chunk.end_line in entry_lines
        assert chunk.start_line <= chunk.end_line
        # The entry on the chunk's first line contains the chunk's first line.
        heads = [e.text for e in transcript.entries if e.line == chunk.start_line]
        first = chunk.content.split("\n")[0]
        assert any(first in h for h in heads)


SECTIONED = (
    "# Guide\n\nIntro line.\n\n## Error Handling\n\n"
    + "".join(f"Sentence {n} says how failures are wrapped and reported.\n" for n in range(60))
    + "\n```bash\n# not a heading, a shell comment\nmise run lint\n```\n\n"
    + "".join(f"Line {n} after the code block.\n" for n in range(20))
    + "\n## Next Steps\n\nShip it.\n"
)


def test_markdown_chunks_carry_the_titles_of_their_sections() -> None:
    chunks = chunk_markdown(SECTIONED, tokens=60, overlap=0)
    by_start = {c.content.split("\n")[0]: c.headings for c in chunks}
    assert by_start["# Guide"] == ""  # a chunk opening with its heading needs no title
    inside = [c for c in chunks if c.content.startswith(("Sentence", "Line", "```"))]
    assert len(inside) > 2
    # The shell comment inside the fence is not a heading.
    assert {c.headings for c in inside} == {"Guide > Error Handling"}
    # A chunk that opens a sibling section keeps only the parent.
    assert by_start["## Next Steps"] == "Guide"


def test_transcript_chunks_have_no_section_titles() -> None:
    transcript = parse_transcript(
        (TESTDATA / "claude-code" / "entire_c9883595c929_v2.0.74_small.jsonl").read_text()
    )
    assert all(c.headings == "" for c in chunk_transcript(transcript, tokens=100, overlap=0))


def test_chunk_sizes_count_a_wide_character_as_a_token() -> None:
    # At four characters a token a Chinese file was chunked ~4x larger than its token setting.
    text = "# 架構\n\n" + "".join(
        f"第{n}段：機器人把工作階段的紀錄寫進資料庫，再由背景工作整理。\n\n" for n in range(80)
    )
    chunks = chunk_markdown(text, tokens=100, overlap=20)
    assert len(chunks) > 5
    assert max(estimate_tokens(chunk.content) for chunk in chunks) <= 100
    assert_lines_exact(text, chunks)
    english = "".join(f"Paragraph {n} says how the bot writes session logs.\n\n" for n in range(80))
    sizes = [len(chunk.content) for chunk in chunk_markdown(english, tokens=100, overlap=20)]
    assert 300 < max(sizes) <= 400  # ASCII text is sized as before, four characters a token


def _fence_state_at_lines(text: str) -> list[bool]:
    """For each line of `text`, whether it starts inside a fenced code block (CommonMark's
    rule: a closing fence has the opener's character, at least its length, and no info)."""
    inside: list[bool] = []
    fence = ""
    for line in text.split("\n"):
        inside.append(bool(fence))
        stripped = line.lstrip(" ")
        marker = stripped[: len(stripped) - len(stripped.lstrip(stripped[:1]))] if stripped else ""
        if len(line) - len(stripped) > 3 or len(marker) < 3 or marker[0] not in "`~":
            continue
        if not fence:
            fence = marker
        elif marker[0] == fence[0] and len(marker) >= len(fence):
            fence = "" if not stripped[len(marker) :].strip() else fence
    return inside


def test_a_closing_fence_stays_with_its_code_block() -> None:
    # The markdown splitter cuts before "```\n", which put a block's closing fence at the start
    # of the next chunk: quoted alone, that chunk opened a code block where its prose began.
    for path in sorted((TESTDATA / "memory-md").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        inside = _fence_state_at_lines(text)
        lines = text.split("\n")
        for tokens in (200, 400):
            chunks = chunk_markdown(text, tokens=tokens, overlap=tokens // 5)
            assert_lines_exact(text, chunks)
            for chunk in chunks:
                first = chunk.content.split("\n")[0].strip()
                # A reopened block's fence is a line from above the chunk, not a closing one.
                on_line = first == lines[chunk.start_line - 1].strip()
                fence = first.startswith(("```", "~~~"))
                starts_closing = inside[chunk.start_line - 1] and fence and on_line
                assert not starts_closing, (path.name, tokens, chunk.start_line)
            covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
            assert all(i + 1 in covered for i, line in enumerate(lines) if line.strip())


def test_a_moved_closing_fence_ends_the_chunk_holding_its_block() -> None:
    code = "```python\n" + "".join(f"value_{i} = {i}\n" for i in range(40)) + "```\n"
    text = f"# Doc\n\n{code}\nprose after the block\n"
    chunks = chunk_markdown(text, tokens=60, overlap=0)
    holder = next(c for c in chunks if "value_39 = 39" in c.content)
    assert holder.content.endswith("```")
    assert not any(c.content.startswith("```\n") or c.content == "```" for c in chunks[1:])
    assert_lines_exact(text, chunks)


def test_a_chunk_starting_inside_a_code_block_reopens_it() -> None:
    # The splitter cuts inside blocks (at 200 tokens a mermaid diagram longer than a chunk, and
    # with a short overlap blocks that fit): the chunk after the cut began with the rest of the
    # code, shown as prose when quoted alone.
    for path in sorted((TESTDATA / "memory-md").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        inside = _fence_state_at_lines(text)
        for tokens, overlap in ((200, 40), (200, 80), (400, 80)):
            chunks = chunk_markdown(text, tokens=tokens, overlap=overlap)
            assert_lines_exact(text, chunks)
            for chunk in chunks:
                if inside[chunk.start_line - 1]:
                    assert chunk.content.startswith(("```", "~~~")), (path.name, chunk)


def test_a_block_longer_than_a_chunk_is_cut_at_lines_and_reopened() -> None:
    code = "~~~mermaid\n" + "".join(f"    A{i} --> B{i}\n" for i in range(80)) + "~~~\n"
    text = f"# Flow\n\nThe steps:\n\n{code}\nafter\n"
    chunks = chunk_markdown(text, tokens=60, overlap=10)
    assert_lines_exact(text, chunks)
    inner = [c for c in chunks if "A40 --> B40" in c.content]
    assert inner
    assert all(c.content.startswith("~~~mermaid\n") for c in inner)
    assert all(c.content.count("~~~mermaid") <= 1 for c in chunks)


@pytest.mark.parametrize(("fence", "info"), [("````", "mermaid"), ("````", ""), ("~~~~", "")])
def test_a_long_fence_is_cut_only_at_line_ends_and_reopened_whole(fence: str, info: str) -> None:
    # The splitter's "```\n" separator matches inside "````\n": the closing fence was cut after
    # its first backtick, and the chunk after it, reopened, held the prose in an unclosed block
    # (a bare "````" opener was cut the same way, a chunk of "`" alone).
    code = "".join(f"    A{i} --> B{i} [label of edge number {i}]\n" for i in range(40))
    prose = "".join(f"Paragraph {p} of prose explaining the diagram.\n\n" for p in range(12))
    text = f"# Doc\n\n{'Some prose line here.' * 20}\n\n{fence}{info}\n{code}{fence}\n\n{prose}"
    for tokens, overlap in ((120, 20), (60, 10), (100, 0)):
        chunks = chunk_markdown(text, tokens=tokens, overlap=overlap)
        assert_lines_exact(text, chunks)
        for chunk in chunks:
            fences = [line for line in chunk.content.split("\n") if line.startswith(("`", "~"))]
            if "A" in chunk.content.split("\n")[-1]:  # ends inside the block: reopened or open
                assert fences == [fence + info], (tokens, chunk)
            elif "A39 --> B39" in chunk.content:
                assert fences == [fence + info, fence], (tokens, chunk)
            else:
                assert fences == [], (tokens, chunk)
