"""All search SQL: the keyword and vector branches and their fusion, as one statement.

The statement is assembled from fixed parts (which branches run, which filters are present) and
every value is a bound parameter, except the model identity and width: a partial expression HNSW
index (`(embedding::halfvec(D)) ... WHERE model = '<identity>'`) is only usable when the query
repeats the cast and the predicate literally, which a generic plan over a bound parameter cannot
prove. Both come from our own settings, never from a request.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.vector_index import indexed_distance_sql
from app.index.terms import words
from app.search.fusion import WEIGHTED_TEXT, WEIGHTED_VECTOR
from app.search.schemas import SearchMode

# `idf` (the default): the sum over the query's words of idf(word) x ts_rank(row, word). ts_rank
# weighs every word alike, so a row repeating `run` or `test` outranked the one holding the rare
# word the question is about; BM25 weighs each word by its rarity, and ts_rank supplies the
# per-word frequency and length normalisation (see docs/search.md for the measurements).
RankFunction = Literal["idf", "ts_rank", "ts_rank_cd"]

MAX_TERMS = 24
MAX_PAIR_TERMS = 8  # the strict tier ORs every pair of the 8 rarest content words: at most 28
# A word held by more than this share of the index rows (pg_stats' most common elements of `tsv`),
# and by more than COMMON_TERM_ROWS rows, is left out of the pair and single-word tiers' GIN
# scans; the all-words tier still requires it. The row bound keeps small indexes, where no scan is
# costly, searching every word.
COMMON_TERM_SHARE = 0.05
COMMON_TERM_ROWS = 1000
# The pair tier's GIN OR reads every posting of its words and tests each row it finds against
# every pair, so its cost grows with (rows holding the words) x (pairs): at 100k rows seven words
# of 0-4% each (21 pairs over ~15,000 postings) took 16 ms on a quiet machine. Past the two rarest
# words, a word joins the pairs only while the pair words together are held by at most this share
# of the rows (shares as in COMMON_TERM_SHARE: 0 for a word under COMMON_TERM_ROWS rows).
PAIR_SHARE_BUDGET = 0.05
# A natural-language OR query over a big index matches a large share of it, and ranking every match
# costs ~40 us a row. So each tier (every word, two or more, one) ranks at most this many rows,
# and a tier is read only to fill up what the better tiers left short (see `_keyword_cte`).
ALL_RANK_CAP = 100
STRICT_RANK_CAP = 300
LOOSE_RANK_CAP = 100
# ANN recall@10 against exact search at 100k rows under a project filter (160 queries): ef_search
# 40 gave 0.93, 100 0.939, 120 0.948, 160 0.963 (+1.6 ms p50), 200 0.968. 160 is the floor, widened
# to the candidate count.
EF_SEARCH_FLOOR = 160
# Postgres's `english` stop words (tsearch_data/english.stop); a test checks they agree.
ENGLISH_STOP_WORDS = frozenset(
    "i me my myself we our ours ourselves you your yours yourself yourselves he him his himself "
    "she her hers herself it its itself they them their theirs themselves what which who whom "
    "this that these those am is are was were be been being have has had having do does did "
    "doing a an the and but if or because as until while of at by for with about against "
    "between into through during before after above below to from up down in out on off over "
    "under again further then once here there when where why how all any both each few more "
    "most other some such no nor not only own same so than too very s t can will just don "
    "should now".split()
)
PREFIX_MIN_CHARS = 3  # a prefix of one or two letters matches half the corpus and ranks nothing
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
# Exact phrases: a quoted phrase, or a token shaped like code (snake_case, camelCase, a dotted or
# `::` member, a path). The keyword branch sees only its parts, which common words share.
MAX_PHRASES = 4
PHRASE_MIN_CHARS = 4
PHRASE_MAX_CHARS = 200
_QUOTED = re.compile(r'"([^"]+)"')
_CODE_SHAPE = re.compile(r"[a-z0-9][A-Z]|\w_\w|\w(?:\.|::|/|->)\w")
_EDGE_PUNCTUATION = "\"'`()[]{}<>,;:!?."


def keyword_terms(query: str) -> list[str]:
    """The query's words as the index sees them: camelCase split, every run of other characters
    than letters, digits, combining marks and zero-width joiners a separator, lower-cased,
    de-duplicated in order (two spellings of one word, composed and decomposed, count once).
    Nothing else of the user's text survives."""
    seen: dict[str, str] = {}
    for word in words(_CAMEL.sub(r"\1 \2", query)):
        term = word.lower()
        seen.setdefault(term if term.isascii() else unicodedata.normalize("NFC", term), term)
    return list(seen.values())[:MAX_TERMS]


def exact_phrases(query: str) -> list[str]:
    """The query's quoted phrases and code-shaped tokens, lower-cased, to match literally.

    `modelRouterService` or `RateLimiter.hit` in a chunk's text is far stronger evidence than its
    parts (`model`, `router`, `service`), which the keyword branch ranks among every row that
    holds those common words."""
    found: dict[str, None] = {}
    for phrase in _QUOTED.findall(query):
        found.setdefault(" ".join(phrase.split()).lower(), None)
    for token in _QUOTED.sub(" ", query).split():
        token = token.strip(_EDGE_PUNCTUATION)
        if token.endswith("()"):
            token = token[:-2]
        if _CODE_SHAPE.search(token):
            found.setdefault(token.lower(), None)
    return [phrase for phrase in found if PHRASE_MIN_CHARS <= len(phrase) <= PHRASE_MAX_CHARS][
        :MAX_PHRASES
    ]


def content_terms(terms: list[str]) -> list[str]:
    """The terms the `english` configuration keeps (stop words removed)."""
    return [term for term in terms if term not in ENGLISH_STOP_WORDS]


def _spellings(term: str) -> list[str]:
    """The distinct spellings among `term`'s own, its composed (NFC) and decomposed (NFD).

    The index holds a word as the text spells it: `résumé` composed from an editor, decomposed
    (NFD) from a macOS file name or tool; a search for one spelling found no row of the other.
    The term's own spelling stays for the CJK compatibility ideographs (U+F900, U+2F800 ...),
    whose NFC and NFD are another character, which a text holding them lacks. (U+212B ANGSTROM
    SIGN needs no such care: lower-casing makes it U+00E5, as Postgres's does in the text.)

    An ASCII term is its only spelling. A search asks for a term's spellings ~30 times (every
    operand, weight and scale), and the two normalisations made its Python 1.6x as costly."""
    if term.isascii():
        return [term]
    return list(
        dict.fromkeys(
            (term, unicodedata.normalize("NFC", term), unicodedata.normalize("NFD", term))
        )
    )


def _operand(term: str, prefix: bool) -> str:
    """`term` as a tsquery operand, matching each of its spellings (see `_spellings`)."""
    suffix = ":*" if prefix else ""
    spellings = _spellings(term)
    if len(spellings) == 1:
        return f"'{term}'{suffix}"
    return "(" + " | ".join(f"'{spelling}'{suffix}" for spelling in spellings) + ")"


# ts_rank divides an OR's score by its count of operands, and a row holds a word in one
# spelling: an accented word ORed as two spellings counted half of an ASCII word, even where
# text and query were both composed. Its score is multiplied back by that count, so a row holding
# one spelling ranks exactly as a one-spelling operand would. ts_rank_cd has no such division.
def idf_weight(term: str, idf: float) -> float:
    """The `idf` ranking's weight of `term`'s operand (see `idf_operands`): its IDF, times its
    count of spellings, which its ts_rank divides by."""
    return idf * len(_spellings(term))


def or_rank_scale(terms: list[str]) -> float:
    """What undoes, for `ts_rank` over the whole OR of `tsquery_text`, its division by the extra
    spellings' operands: the operand count over the content terms' count."""
    content = content_terms(terms)
    if not content:
        return 1.0
    return sum(len(_spellings(term)) for term in content) / len(content)


def _operands(terms: list[str], prefix_last: bool) -> list[str]:
    prefix = prefix_last and bool(terms) and len(terms[-1]) >= PREFIX_MIN_CHARS
    return [_operand(term, prefix and n == len(terms) - 1) for n, term in enumerate(terms)]


def tsquery_text(terms: list[str], *, prefix_last: bool = True) -> str:
    """An OR of the content terms for `to_tsquery('english', ...)`; the last may match as a prefix.

    Terms are letters, digits, marks and joiners only (see `keyword_terms`), so quoting them
    cannot be escaped from."""
    return " | ".join(_operands(content_terms(terms), prefix_last))


def idf_operands(terms: list[str], *, prefix_last: bool = True) -> dict[str, str]:
    """Each content term's own operand of `tsquery_text` (the last may be a prefix), by term."""
    content = content_terms(terms)
    return dict(zip(content, _operands(content, prefix_last), strict=True))


def bm25_idf(share: float, rows: float) -> float:
    """BM25's inverse document frequency of a word held by `share` of `rows` rows."""
    held = share * rows
    return math.log(1 + (rows - held + 0.5) / (held + 0.5))


def all_tsquery_text(terms: list[str], *, prefix_last: bool = True) -> str:
    """An AND of the content terms: rows matching every word rank above the rest.

    The prefix applies only to a one-word query (a word being typed): GIN answers a prefix by
    collecting the posting lists of every lexeme sharing it before it can intersect, which cost
    6-16 ms at 100k rows where the exact AND costs 0.2 ms, and changed no relevance figure."""
    content = content_terms(terms)
    return " & ".join(_operands(content, prefix_last and len(content) == 1))


def rare_terms(terms: list[str], shares: Mapping[str, float] | None = None) -> list[str]:
    """The content terms that are not common, rarest first; `shares` maps a term to the share of
    rows holding it, already 0 where fewer than COMMON_TERM_ROWS rows hold it.

    A GIN OR visits every posting of every word in it, so one word held by a third of the rows
    costs more than all the others; such a word also says little about which row is meant (its
    IDF is near zero). Without statistics every term counts as rare, in query order."""
    shares = shares or {}
    content = content_terms(terms)
    rare = [term for term in content if shares.get(term, 0.0) <= COMMON_TERM_SHARE]
    return sorted(rare, key=lambda term: shares.get(term, 0.0))


def _rare_operands(
    terms: list[str], shares: Mapping[str, float] | None, prefix_last: bool
) -> list[str]:
    content = content_terms(terms)
    operands = dict(zip(content, _operands(content, prefix_last), strict=True))
    return [operands[term] for term in rare_terms(terms, shares)]


def strict_tsquery_text(
    terms: list[str], *, prefix_last: bool = True, shares: Mapping[str, float] | None = None
) -> str:
    """Rows matching at least two rare content terms: an OR of every pair of the rarest
    `MAX_PAIR_TERMS` within `PAIR_SHARE_BUDGET`; empty under two rare terms."""
    rare = rare_terms(terms, shares)
    operands = _rare_operands(terms, shares, prefix_last)[:MAX_PAIR_TERMS]
    held = 0.0
    for count, term in enumerate(rare[: len(operands)]):
        held += (shares or {}).get(term, 0.0)
        if count >= 2 and held > PAIR_SHARE_BUDGET:
            operands = operands[:count]
            break
    pairs = [f"({a} & {b})" for i, a in enumerate(operands) for b in operands[i + 1 :]]
    return " | ".join(pairs)


def loose_tsquery_text(
    terms: list[str], *, prefix_last: bool = True, shares: Mapping[str, float] | None = None
) -> str:
    """The single-word tier's match: an OR of the rare content terms, or of the one least common
    term when every term is common (a row holding only a very common word is noise).

    The last word is no prefix when it is itself held by more than COMMON_TERM_ROWS rows (its
    share is known): such a word is complete, and as a prefix it pulls every longer lexeme into
    the OR scan (`timing` as `'time':*` adds `timeout`, `timestamp`, ...: 9,382 rows instead of
    4,799 at 100k, 7 ms of a 13 ms statement). A word being typed (`deplo`) is no lexeme of the
    index and keeps its prefix."""
    content = content_terms(terms)
    if content and (shares or {}).get(content[-1], 0.0) > 0:
        prefix_last = False
    operands = _rare_operands(terms, shares, prefix_last)
    if operands:
        return " | ".join(operands)
    if not content:
        return ""
    shares = shares or {}
    rarest = min(range(len(content)), key=lambda n: shares.get(content[n], 0.0))
    return _operands(content, prefix_last)[rarest]


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """Filters applied identically to both branches."""

    project_path: str | None = None
    sources: tuple[str, ...] | None = None
    path_prefix: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def shape(self) -> tuple[bool, ...]:
        return (
            self.project_path is not None,
            self.sources is not None,
            self.path_prefix is not None,
            self.since is not None,
            self.until is not None,
            self.path_prefix is not None and not self.path_prefix.isascii(),
        )

    def params(self) -> dict[str, Any]:
        # A path is stored as the disk spells it: decomposed (NFD) from a macOS folder, while the
        # prefix a client builds from the project key, or types, is composed. See `_filter_sql`.
        head = composed = decomposed = None
        if self.path_prefix is not None:
            nfc = unicodedata.normalize("NFC", self.path_prefix)
            head = _like_prefix(_ascii_head(nfc))
            composed = _like_prefix(nfc)
            decomposed = _like_prefix(unicodedata.normalize("NFD", self.path_prefix))
        return {
            "f_project": self.project_path,
            "f_sources": list(self.sources) if self.sources is not None else None,
            "f_path_head": head,
            "f_path_prefix": composed,
            "f_path_prefix_nfd": decomposed,
            "f_since": self.since,
            "f_until": self.until,
        }


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern for the paths starting with `prefix`, its wildcards taken literally."""
    return re.sub(r"([\\%_])", r"\\\1", prefix) + "%"


# The only non-ASCII characters whose NFC is ASCII (U+212A KELVIN SIGN, U+037E GREEK QUESTION
# MARK, U+1FEF GREEK VARIA): a path stored with them composes to K, ; or `.
_ASCII_FROM_OTHERS = frozenset("K;`")


def _ascii_head(composed_prefix: str) -> str:
    """The leading characters of `composed_prefix` that a path stored in any spelling starts with
    when its composed form starts with the prefix: ASCII, which no normalisation changes."""
    for n, char in enumerate(composed_prefix):
        if not char.isascii() or char in _ASCII_FROM_OTHERS:
            return composed_prefix[:n]
    return composed_prefix


# What a reader naming a project sees: the project's rows, and the global and project-less shared
# memories, indexed (source kv) under the empty project. A read by key resolves those for the
# project (app.memories.service.visible_to); searching the project alone left them out of search,
# the context block and the proxy. Session memories have no index rows (only their session may
# read them). The `kv` test keeps any other row stored without a project out of every project.
PROJECT_FILTER = "(c.project_path = :f_project OR (c.project_path = '' AND c.source = 'kv'))"


def _filter_sql(shape: tuple[bool, ...]) -> str:
    project, sources, path_prefix, since, until, accented_prefix = shape
    clauses = []
    if project:
        clauses.append(PROJECT_FILTER)
    if sources:
        clauses.append("c.source = ANY(CAST(:f_sources AS text[]))")
    if path_prefix and not accented_prefix:
        # An ASCII prefix is spelled alike in every form; one LIKE also keeps the planner's row
        # estimate, on which the vector branch's choice between HNSW and a full scan turns.
        clauses.append("c.file_path LIKE :f_path_prefix ESCAPE '\\'")
    elif path_prefix:
        # A path spelled wholly in one form matches that spelling of the prefix; one written
        # partly in each (a composed parent a client made, a decomposed file written on macOS)
        # only its composed form. `normalize` on every row cost 1.3-1.5x a prefix search at 20k
        # rows, where the vector branch scans them, so it runs only on the rows starting with the
        # prefix's ASCII head and matching neither spelling as stored (OR stops at a match).
        clauses.append(
            "c.file_path LIKE :f_path_head ESCAPE '\\' AND (c.file_path LIKE :f_path_prefix"
            " ESCAPE '\\' OR c.file_path LIKE :f_path_prefix_nfd ESCAPE '\\'"
            " OR normalize(c.file_path, NFC) LIKE :f_path_prefix ESCAPE '\\')"
        )
    if since:
        clauses.append("c.created_at >= :f_since")
    if until:
        clauses.append("c.created_at < :f_until")
    return "".join(f" AND {clause}" for clause in clauses)


def _vector_cte(model: str, dims: int, filters: str) -> str:
    literal = model.replace("'", "''")
    distance = indexed_distance_sql(
        dims, column="c.embedding", query=f"CAST(:qvec AS vector({dims}))"
    )
    # relaxed_order lets the index return rows slightly out of order; rank after re-sorting.
    return f"""
vec_raw AS MATERIALIZED (
  SELECT c.id, {distance} AS distance
  FROM memory_chunks c
  WHERE c.model = '{literal}'{filters}
  ORDER BY {distance}
  LIMIT :candidates
),
vec AS (
  SELECT id, 1 - distance AS similarity, row_number() OVER (ORDER BY distance, id) AS rank
  FROM vec_raw WHERE 1 - distance >= :vector_floor
)"""


def _rank_expression(rank_fn: RankFunction, idf_terms: int) -> str:
    """A row's keyword score. For `idf`, one weighted ts_rank per query word, written out: a
    correlated subquery over a table of the words cost twice as much per ranked row."""
    if rank_fn == "ts_rank_cd":
        return "ts_rank_cd(c.tsv, to_tsquery('english', :tsq), :rank_norm)"
    if rank_fn != "idf" or idf_terms == 0:
        # A real, as ts_rank returns: a query without an accented word (scale 1) keeps the very
        # values, and so the ties, it had before the scale.
        return "ts_rank(c.tsv, to_tsquery('english', :tsq), :rank_norm) * CAST(:rank_scale AS real)"
    words = (
        f"CAST(:idf_w{n} AS float8) * ts_rank(c.tsv, to_tsquery('english', :idf_q{n}), :rank_norm)"
        for n in range(idf_terms)
    )
    return f"({' + '.join(words)})"


def _tier_rows(tier: int, tsq_param: str, cap: int, filters: str, guard: str) -> str:
    """Up to `cap` rows matching `tsq_param`, as the GIN bitmap yields them, with their `tsv`."""
    return f"""
  SELECT c.id, c.tsv, {tier} AS tier FROM memory_chunks c
  WHERE c.tsv @@ to_tsquery('english', :{tsq_param}){filters}{guard}
  LIMIT {cap}"""


def _keyword_cte(filters: str, strict: bool, rank: str) -> str:
    # Tiers are read best first and a tier is only read when the better ones hold fewer rows than
    # the candidate count. The all-words AND is an intersection of posting lists and cheap; the
    # OR of every pair makes the GIN index visit almost every row holding any word, which at 100k
    # rows cost 20-40 ms, so most queries (whose words co-occur often enough) now skip it.
    # A better tier that is short is complete, so excluding its ids is exact.
    # The tiers' rows are ranked once, together, and each tier keeps its best `candidates`: the
    # rank expression (one ts_rank per query word for `idf`) is written once instead of once per
    # tier, which kept most statements under psycopg's 4 KB parse cache and planned each word's
    # `to_tsquery` once.
    after_all = (
        " AND (SELECT count(*) FROM kw_all) < :candidates AND c.id NOT IN (SELECT id FROM kw_all)"
    )
    strict_rows = (
        _tier_rows(1, "tsq_strict", STRICT_RANK_CAP, filters, after_all)
        if strict
        else "SELECT NULL::bigint AS id, NULL::tsvector AS tsv, 1 AS tier WHERE false"
    )
    after_strict = (
        " AND (SELECT count(*) FROM kw_all) + (SELECT count(*) FROM kw_strict) < :candidates"
        " AND c.id NOT IN (SELECT id FROM kw_all UNION ALL SELECT id FROM kw_strict)"
    )
    loose_rows = _tier_rows(0, "tsq_loose", LOOSE_RANK_CAP, filters, after_strict)
    return f"""
kw_all AS MATERIALIZED ({_tier_rows(2, "tsq_all", ALL_RANK_CAP, filters, "")}
),
kw_strict AS MATERIALIZED ({strict_rows}
),
kw_loose AS MATERIALIZED ({loose_rows}
),
kw_ranked AS (
  SELECT id, tier, rank_score,
         row_number() OVER (PARTITION BY tier ORDER BY rank_score DESC, id) AS in_tier
  FROM (SELECT c.id, c.tier, {rank} AS rank_score
        FROM (SELECT * FROM kw_all UNION ALL SELECT * FROM kw_strict
              UNION ALL SELECT * FROM kw_loose) AS c) AS r
),
kw AS (
  SELECT id, rank_score, tier,
         row_number() OVER (ORDER BY tier DESC, rank_score DESC, id) AS rank,
         rank_score / NULLIF(max(rank_score) OVER (), 0) AS normalised
  FROM kw_ranked
  WHERE in_tier <= :candidates AND rank_score >= :keyword_floor
)"""


_EMPTY_VEC = (
    "vec AS (SELECT NULL::bigint AS id, NULL::float8 AS similarity, NULL::bigint AS rank "
    "WHERE false)"
)
_EMPTY_KW = (
    "kw AS (SELECT NULL::bigint AS id, NULL::float8 AS rank_score, NULL::int AS tier, "
    "NULL::bigint AS rank, NULL::float8 AS normalised WHERE false)"
)

_SCORES: dict[str, str] = {
    # RRF, with a keyword rank discounted by how much of the query its row holds: on a
    # natural-language question a row sharing one word of five is weak evidence, and at full
    # weight such rows (found by both branches) pushed the vector branch's best hit out of the top
    # ten. Tier 2 is every word, 1 two or more, 0 one; the weights are settings.
    "hybrid": (
        "COALESCE(:w_vector / (:rrf_k + v.rank), 0) + COALESCE(:w_keyword"
        " * (CASE k.tier WHEN 2 THEN 1.0 WHEN 1 THEN CAST(:w_tier1 AS float8)"
        " ELSE CAST(:w_tier0 AS float8) END) / (:rrf_k + k.rank), 0)"
    ),
    "weighted": (
        f"{WEIGHTED_VECTOR} * COALESCE(v.similarity, 0) + "
        f"{WEIGHTED_TEXT} * COALESCE(k.normalised, 0)"
    ),
    "vector": "v.similarity",
    # Rows matching every word, then two or more, then one; ts_rank_cd orders within a tier.
    "keyword": "k.tier + COALESCE(k.normalised, 0)",
}


# A row holding the query's exact phrases gains what a first rank in one more list would give, in
# proportion to the share of the phrases it holds: `modelRouterService` found literally outranks
# rows that merely share its parts in both branches.
_EXACT_SCORE = (
    "CAST(:w_exact AS float8) / (CAST(:rrf_k AS float8) + 1)"
    " * e.held / cardinality(CAST(:phrases AS text[]))::float8"
)
# The count is a lateral join, so it runs once per fused row: written into the score expression it
# ran three times (the score is filtered, sorted and returned), 1.2-1.8 ms a search at 100k rows.
_EXACT_JOIN = """
  JOIN memory_chunks c ON c.id = COALESCE(v.id, k.id)
  CROSS JOIN LATERAL (
    SELECT count(*) AS held FROM unnest(CAST(:phrases AS text[])) AS p(phrase)
    WHERE strpos(lower(c.content), p.phrase) > 0
       OR strpos(lower(COALESCE(c.file_path, '')), p.phrase) > 0) e"""


# A snippet's length: a text this short is shown whole, a longer one by the fragments around its
# matches (or, without a match, by its opening: app/search/service.py).
SNIPPET_CHARS = 300
_WHOLE_HEADLINE = "'HighlightAll=true, StartSel=**, StopSel=**'"
_FRAGMENTS_HEADLINE = (
    "'MaxFragments=2, MaxWords=24, MinWords=8, FragmentDelimiter=\" … \", StartSel=**, StopSel=**'"
)


@lru_cache(maxsize=256)
def search_statement(
    mode: SearchMode,
    model: str,
    dims: int,
    shape: tuple[bool, ...],
    use_vector: bool,
    use_keyword: bool,
    strict: bool = False,
    snippets: bool = True,
    exact: bool = False,
    rank_fn: RankFunction = "idf",
    idf_terms: int = 0,
    evidence: bool = False,
) -> TextClause:
    """The whole search as one statement: the branches asked for, the fusion, the final rows.

    `exact` adds the exact-phrase boost to the hybrid score. `use_keyword` also decides the
    snippet: with query terms it highlights them. Without `snippets` the column is empty:
    `ts_headline` re-parses each row's text, and callers that only read `content` (the context
    builder) need not pay for it. `evidence` keeps only rows with some evidence of relevance:
    a cosine similarity of at least `:min_similarity`, or two or more of the query's words.

    A kv row whose memory has expired is left out of the final rows (a primary-key probe for
    each of at most `limit` rows): its index row goes only when the memory is purged (the
    worker, every minute; never without one), and until then search and the context block served
    a value every read already called gone. So is the row of a session memory, which only its
    session may read: one indexed before session memories lost their index rows (walk10) stays
    until the memory is written again, and a project-less one sits under the empty project, which
    every project's search includes. Such a search returns fewer than `limit` rows."""
    filters = _filter_sql(shape)
    score, exact_join = _SCORES[mode], ""
    if exact and mode == "hybrid":
        # Only the fused candidates (at most two candidate lists) are tested, so the literal
        # match costs a few microseconds a row and never a scan.
        score = f"{score} + {_EXACT_SCORE}"
        exact_join = _EXACT_JOIN
    ctes = [
        _vector_cte(model, dims, filters) if use_vector and mode != "keyword" else _EMPTY_VEC,
        _keyword_cte(filters, strict, _rank_expression(rank_fn, idf_terms))
        if use_keyword and mode != "vector"
        else _EMPTY_KW,
    ]
    # The text's own `**` would nest with the highlight markers (`****Rate** limits**`). A text
    # a snippet holds whole is shown whole: fragments start at a word of the match's cover, and
    # a one-line observation lost its tool's `run_` ("shell_command cargo test …").
    headline = (
        "ts_headline('english', replace(c.content, '**', ''), to_tsquery('english', :tsq), {})"
    )
    snippet = (
        f"CASE WHEN char_length(c.content) <= {SNIPPET_CHARS} "
        f"THEN {headline.format(_WHOLE_HEADLINE)} ELSE {headline.format(_FRAGMENTS_HEADLINE)} END"
        if snippets and use_keyword
        else "''::text"  # no words to highlight: the service quotes the text's opening
    )
    evidence_sql = (
        " AND (COALESCE(vector_score, -1) >= CAST(:min_similarity AS float8) OR keyword_tier >= 1)"
        if evidence
        else ""
    )
    sql = f"""
WITH {",".join(ctes)},
fused AS (
  SELECT COALESCE(v.id, k.id) AS id, v.rank AS vector_rank, v.similarity AS vector_score,
         k.rank AS keyword_rank, k.rank_score AS keyword_score, k.tier AS keyword_tier,
         {score} AS score
  FROM vec v FULL OUTER JOIN kw k ON v.id = k.id{exact_join}
),
top AS (
  SELECT * FROM fused WHERE score IS NOT NULL AND score >= :min_score{evidence_sql}
  ORDER BY score DESC, id LIMIT :limit
)
SELECT t.id, t.score, t.vector_rank, t.vector_score, t.keyword_rank, t.keyword_score,
       c.source, c.content, {snippet} AS snippet, c.file_path AS path, c.start_line,
       c.end_line, c.session_id, c.observation_id, c.created_at, m.key AS memory_key
FROM top t JOIN memory_chunks c ON c.id = t.id
LEFT JOIN memories m ON m.id = c.memory_id
WHERE m.id IS NULL OR (m.scope <> 'session' AND (m.expires_at IS NULL OR m.expires_at > now()))
ORDER BY t.score DESC, t.id"""
    return text(sql)


_SCAN_SETTINGS = text(
    "SELECT set_config('hnsw.ef_search', :ef_search, true), "
    "set_config('hnsw.iterative_scan', 'relaxed_order', true)"
)
# Every pooled connection gets the scan settings once (see `app.db.engine`), so a search with the
# default candidate count skips the `set_config` round trip (a few ms on a loaded machine, where
# each round trip waits for the server process to be scheduled).
SCAN_DEFAULTS = f"SET hnsw.ef_search = {EF_SEARCH_FLOOR}; SET hnsw.iterative_scan = relaxed_order"
SCAN_DEFAULTS_FLAG = "agmem_hnsw_scan_defaults"


async def configure_vector_scan(session: AsyncSession, *, candidates: int) -> None:
    """Filtered HNSW returns too few rows unless the scan may iterate and its list is wide."""
    ef_search = max(EF_SEARCH_FLOOR, min(candidates, 1000))
    if ef_search == EF_SEARCH_FLOOR:
        connection = await session.connection()
        if connection.info.get(SCAN_DEFAULTS_FLAG):
            return
    await session.execute(_SCAN_SETTINGS, {"ef_search": str(ef_search)})


async def run_search(
    session: AsyncSession,
    *,
    mode: SearchMode,
    model: str,
    dims: int,
    filters: SearchFilters,
    query_vector: str | None,
    tsq: str,
    tsq_strict: str = "",
    tsq_all: str = "",
    tsq_loose: str = "",
    limit: int,
    candidates: int,
    min_score: float,
    vector_floor: float,
    keyword_floor: float,
    rrf_k: float,
    vector_weight: float,
    keyword_weight: float,
    rank_normalization: int = 0,
    snippets: bool = True,
    phrases: list[str] | None = None,
    exact_weight: float = 1.0,
    tier_weights: tuple[float, float] = (0.5, 0.1),
    rank_function: RankFunction = "idf",
    idf: Mapping[str, float] | None = None,
    min_similarity: float | None = None,
    rank_scale: float = 1.0,
) -> list[Any]:
    """Run one search; rows carry both branch ranks and scores and the fused score.

    `idf` maps each operand of `tsq` (see `idf_operands`) to its weight for the `idf` ranking.
    `min_similarity` drops rows below that cosine similarity unless they hold two or more of the
    query's words (None: no such gate). `rank_scale` multiplies a `ts_rank` over the whole `tsq`
    (see `or_rank_scale`)."""
    use_vector = query_vector is not None and mode != "keyword"
    use_keyword = bool(tsq)
    if not use_vector and not (use_keyword and mode != "vector"):
        return []
    if use_vector:
        await configure_vector_scan(session, candidates=candidates)
    exact = bool(phrases) and exact_weight > 0
    statement = search_statement(
        mode,
        model,
        dims,
        filters.shape(),
        use_vector,
        use_keyword,
        bool(tsq_strict),
        snippets,
        exact,
        rank_function,
        len(idf or {}) if rank_function == "idf" else 0,
        min_similarity is not None,
    )
    params: dict[str, Any] = {
        **filters.params(),
        "qvec": query_vector,
        "tsq": tsq,
        "tsq_strict": tsq_strict,
        "tsq_all": tsq_all,
        "tsq_loose": tsq_loose or tsq,
        "limit": limit,
        "candidates": candidates,
        "min_score": min_score,
        "vector_floor": vector_floor,
        "keyword_floor": keyword_floor,
        "rrf_k": rrf_k,
        "w_vector": vector_weight,
        "w_keyword": keyword_weight,
        "rank_norm": rank_normalization,
        "phrases": phrases or [],
        "w_exact": exact_weight,
        "w_tier1": tier_weights[0],
        "w_tier0": tier_weights[1],
        "min_similarity": min_similarity,
        "rank_scale": rank_scale,
    }
    for n, (operand, weight) in enumerate((idf or {}).items()):
        params[f"idf_q{n}"] = operand
        params[f"idf_w{n}"] = weight
    result = await session.execute(statement, params)
    return list(result.all())


_LEXEME_SHARES = text(
    "SELECT e.lexeme, e.share FROM pg_stats s CROSS JOIN LATERAL "
    "unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(lexeme, share) "
    "WHERE s.schemaname = current_schema() AND s.tablename = 'memory_chunks' "
    "AND s.attname = 'tsv' AND e.lexeme IS NOT NULL"
)
_INDEX_ROWS = text("SELECT reltuples FROM pg_class WHERE oid = 'memory_chunks'::regclass")


async def lexeme_rows(session: AsyncSession) -> tuple[dict[str, float], float]:
    """The share of index rows holding each common lexeme, and the row count, as last sampled."""
    shares = {row.lexeme: float(row.share) for row in await session.execute(_LEXEME_SHARES)}
    count = (await session.execute(_INDEX_ROWS)).scalar_one()
    return shares, max(0.0, float(count))
