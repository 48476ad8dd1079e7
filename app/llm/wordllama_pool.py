"""wordllama's mean-of-token-vectors pooling, computed from cached per-segment sums.

wordllama's tokenizer is Llama 2's BPE with no pre-tokenizer: the normalizer prepends `▁` and turns
every space into `▁`, and BPE then runs over the whole text. No token of its vocabulary holds a
`▁` after another character (only runs of `▁` do), so no merge joins across a spot where a `▁`
follows other text: the text splits there into segments (`▁the`, `▁validateToken,`, `▁▁x`) that
tokenize independently, to the ids the whole text gives (tested token for token). A text's vector
is the mean of its tokens' rows, so it is the count-weighted sum of its segments' row sums over its
token count. Segments repeat across texts: each is tokenized once and its row sum kept, and a chunk
then costs a `split`, a `Counter` and one small matrix product instead of a BPE pass over every
character (docs/benchmarks.md, Sync: 0.76 ms of CPU a 1.1 KB chunk through the tokenizer).

A segment is keyed by its raw text minus the one space that opens it: for text without double,
leading or trailing spaces the keys are just `text.split(" ")`. A text holding one of the
tokenizer's special tokens (`<s>`, `</s>`, `<unk>`, matched in the raw text before normalising)
or a literal `▁` (which would end a key and so split a run of marks) takes the tokenizer's own
path.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from itertools import chain
from typing import Any

import numpy as np
from numpy.typing import NDArray

_MARK = "\u2581"  # sentencepiece's word mark, what the normalizer makes of a space
_KEYS = re.compile(" ( *[^ ]*)")  # over " " + text: each segment's raw text after its first space
_GROUP = 256  # texts whose new segments are tokenized together
# No token of the vocabulary holds an ASCII digit with anything else, so a digit never merges:
# a segment splits around its digits into pieces that tokenize alone, and the pieces ("▁batch",
# ".", "px") repeat across segments that numbers make unique ("▁batch979758588."). Each digit is
# then its own token, whatever surrounds it: a segment's digits add their count times the digit's
# row, ten vectorised passes for all new segments instead of a lookup and a row a digit.
_DIGIT = re.compile("[0-9]")
_DIGIT_RUNS = re.compile("([0-9]+)")


class SegmentPool:
    """Pooled (unnormalised) wordllama vectors; thread-safe, cache bounded to `capacity`."""

    def __init__(self, tokenizer: Any, table: NDArray[np.float32], *, capacity: int = 65_536):
        self._tokenizer = tokenizer  # a copy without padding or truncation
        self._bpe = tokenizer.model
        self._table = table
        self._last = table.shape[0] - 1
        self._capacity = capacity
        self._specials = tuple(
            token.content for token in tokenizer.get_added_tokens_decoder().values()
        )
        self._rows: dict[str, int] = {}
        self._pieces: dict[str, list[int]] = {}  # token ids of digit-free pieces of segments
        self._sums = np.empty((capacity, table.shape[1]), dtype=np.float32)
        digits = [self._clipped(self._piece(digit)) for digit in "0123456789"]
        self._digit_sums = np.stack([table[ids].sum(axis=0) for ids in digits])
        self._digit_tokens = np.array([len(ids) for ids in digits], dtype=np.float32)
        self._tokens = np.empty(capacity, dtype=np.float32)
        # Two sync writers embed in two threads; the cache's row numbers must not move under one.
        self._lock = threading.Lock()

    def pooled(self, texts: list[str]) -> NDArray[np.float32]:
        """The mean token vector of each text (a zero vector for a text without tokens)."""
        out = np.zeros((len(texts), self._table.shape[1]), dtype=np.float32)
        exact: list[int] = []
        with self._lock:
            for start in range(0, len(texts), _GROUP):
                self._pool_group(texts, range(start, min(start + _GROUP, len(texts))), out, exact)
        if exact:
            for index, vector in zip(exact, self._exact([texts[i] for i in exact]), strict=True):
                out[index] = vector
        return out

    def _pool_group(
        self, texts: list[str], indexes: range, out: NDArray[np.float32], exact: list[int]
    ) -> None:
        rows = self._rows
        waiting: list[tuple[int, Counter[str]]] = []  # texts with a segment not cached yet
        for index in indexes:
            text = texts[index]
            if not text:
                continue
            if _MARK in text or ("<" in text and any(s in text for s in self._specials)):
                exact.append(index)
                continue
            counts = Counter(text.split(" "))
            if "" in counts:  # a run of spaces, or one at either end: the general split
                counts = Counter(_KEYS.findall(" " + text))
            found = list(map(rows.get, counts))
            if None in found:
                waiting.append((index, counts))
            else:
                self._mean(out, index, found, counts)
        if not waiting:
            return
        new = {key for _, counts in waiting for key in counts if key not in rows}
        if len(rows) + len(new) > self._capacity:
            rows.clear()  # a long-running process keeps the recent vocabulary
            new = {key for _, counts in waiting for key in counts}
            if len(new) > self._capacity:
                exact.extend(index for index, _ in waiting)
                return
        self._add(list(new))
        for index, counts in waiting:
            self._mean(out, index, [rows[key] for key in counts], counts)

    def _mean(
        self, out: NDArray[np.float32], index: int, found: list[Any], counts: Counter[str]
    ) -> None:
        # The row numbers as one index array, not the list twice: numpy converts a list index
        # on every use (~12 of ~55 µs a chunk).
        rows = np.fromiter(found, dtype=np.intp, count=len(found))
        weights = np.fromiter(counts.values(), dtype=np.float32, count=len(found))
        out[index] = weights @ self._sums[rows] / (weights @ self._tokens[rows])

    def _add(self, keys: list[str]) -> None:
        """Tokenize new segments and keep each one's row sum and token count."""
        split = [self._ids(_MARK + key.replace(" ", _MARK)) for key in keys]
        ids_of = [ids for ids, _ in split]
        lengths = np.fromiter(map(len, ids_of), dtype=np.intp, count=len(ids_of))
        flat = np.fromiter(chain.from_iterable(ids_of), dtype=np.intp, count=int(lengths.sum()))
        np.clip(flat, 0, self._last, out=flat)
        starts = np.zeros(len(keys), dtype=np.intp)
        np.cumsum(lengths[:-1], out=starts[1:])
        first = len(self._rows)
        block = self._sums[first : first + len(keys)]
        # Every segment opens with a non-digit token (its `▁`), so `starts` are all in range.
        block[:] = self._table[flat[starts]]
        # Token by token position: segments are mostly one to three tokens, so a handful of
        # vectorised passes (np.add.reduceat over rows is several times slower).
        position = 1
        longer = np.flatnonzero(lengths > position)
        while longer.size:
            block[longer] += self._table[flat[starts[longer] + position]]
            position += 1
            longer = longer[lengths[longer] > position]
        tokens = lengths.astype(np.float32)
        digits = "".join(d for _, d in split)
        if digits:
            counts = np.fromiter(map(len, (d for _, d in split)), dtype=np.intp, count=len(keys))
            owner = np.repeat(np.arange(len(keys)), counts)
            value = np.frombuffer(digits.encode("ascii"), dtype=np.uint8).astype(np.intp) - 48
            per_digit = np.bincount(owner * 10 + value, minlength=len(keys) * 10)
            per_digit = per_digit.reshape(len(keys), 10).astype(np.float32)
            # Digit by digit, not `per_digit @ self._digit_sums`: a matrix product this size
            # wakes OpenBLAS's threads, which then spin on the other core (~0.15 ms of CPU a
            # chunk on bench.sync, measured as process against thread CPU time).
            for digit in np.flatnonzero(per_digit.any(axis=0)):
                block += per_digit[:, digit, None] * self._digit_sums[digit]
            tokens += (per_digit * self._digit_tokens).sum(axis=1)
        self._tokens[first : first + len(keys)] = tokens
        self._rows.update(zip(keys, range(first, first + len(keys)), strict=True))

    def _ids(self, segment: str) -> tuple[list[int], str]:
        """The token ids of one segment's digit-free pieces (cached), and its digits."""
        if not _DIGIT.search(segment):
            return self._piece(segment), ""
        parts = _DIGIT_RUNS.split(segment)
        ids: list[int] = []
        for piece in parts[::2]:
            if piece:
                ids += self._piece(piece)
        return ids, "".join(parts[1::2])

    def _clipped(self, ids: list[int]) -> list[int]:
        return [min(max(i, 0), self._last) for i in ids]

    def _piece(self, piece: str) -> list[int]:
        ids = self._pieces.get(piece)
        if ids is None:
            if len(self._pieces) >= self._capacity:
                self._pieces.clear()
            ids = self._pieces[piece] = [t.id for t in self._bpe.tokenize(piece)]
        return ids

    def _exact(self, texts: list[str]) -> NDArray[np.float32]:
        """The tokenizer's own path: the same mean, from each text's distinct tokens."""
        vectors = np.zeros((len(texts), self._table.shape[1]), dtype=np.float32)
        encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        for row, encoding in enumerate(encodings):
            ids = np.asarray(encoding.ids, dtype=np.int64)
            if ids.size == 0:
                continue
            np.clip(ids, 0, self._last, out=ids)
            tokens, counts = np.unique(ids, return_counts=True)
            vectors[row] = counts.astype(np.float32) @ self._table[tokens] / np.float32(ids.size)
        return vectors
