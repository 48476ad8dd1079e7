"""The list rule's cost on text whose hyperscan gate fires without a credential's list: a
TypeScript chunk with one React Query `queryKey: [...]`, many short YAML lists under `keys`, and
many assigned ones (`keys = ['name', 'email']`, `sort_keys`, `hotkeys`); and an unclosed triple
quote's before a megabyte of a key's lines.

    uv run python -m bench.privacy_lists

Prints, per case, the best of --rounds (7) rounds of `redact_secrets` (CPU time) per call.
Runs against the `app` it imports: with another tree first on sys.path (`cd <tree> &&
.venv/bin/python -m bench.privacy_lists`, this file copied), that tree's rules.
"""

from __future__ import annotations

import argparse
import time

from app.privacy import redact_secrets

# ~1.65 KB of a React component: one `queryKey: [` (the gate's `Key: [`), no credential.
TS_CHUNK = (
    (
        "import { useQuery, useMutation, useQueryClient } from '@tanstack/react-query'\n"
        "import { fetchTodos, addTodo } from './api'\n\n"
        "export function Todos({ id }: { id: string }) {\n"
        "  const queryClient = useQueryClient()\n"
        "  const query = useQuery({ queryKey: ['todos', id], queryFn: () => fetchTodos(id) })\n"
        "  const mutation = useMutation({\n"
        "    mutationFn: addTodo,\n"
        "    onSuccess: () => {\n"
        "      queryClient.invalidateQueries({ queryKey: ['todos'] })\n"
        "    },\n"
        "  })\n"
    )
    + (
        "  // Render the list of todos with their titles and a button to add one more.\n"
        "  const items = query.data?.map((todo) => <li key={todo.id}>{todo.title}</li>) ?? []\n"
    )
    * 8
    + "  return <ul>{items}</ul>\n}\n"
)

CASES = {
    "ts chunk (1.65 KB, one queryKey: [)": (TS_CHUNK, 20_000),
    "keys: [a, b] x 15k lines": ("keys: [a, b]\n" * 15_000, 5),
    # Python's or TOML's assigned lists of strings under a `key` name that names no credential:
    # the `name = [` gate (privacy24) lets the rule run on each.
    "keys = ['name', 'email'] x 15k lines": ("keys = ['name', 'email']\n" * 15_000, 5),
    # The same module holding one credential's list: the rule runs, on every line (privacy25).
    "... and one api_keys = ['k1abc']": (
        "keys = ['name', 'email']\n" * 15_000 + "api_keys = ['k1abc']\n",
        5,
    ),
    # Names ending in another word after a credential word's letter before `key` (`sort_keys`'s
    # and `hotkeys`' `t`, as `secretkey`'s), with one credential's list (privacy27).
    "sort_keys = ['name', 'email'] x 15k and one api_keys": (
        "sort_keys = ['name', 'email']\n" * 15_000 + "api_keys = ['k1abc']\n",
        5,
    ),
    "hotkeys: [ctrl+s, ctrl+q] x 15k and one api_keys": (
        "hotkeys: [ctrl+s, ctrl+q]\n" * 15_000 + "api_keys: [k1abc]\n",
        5,
    ),
    # An unclosed triple quote before a megabyte of a key's lines (privacy27: the line-by-line
    # read of generation 13 took 30-60 ms, generation 12 0.4-3 ms).
    'private_key = """ and 1 MB of a key\'s lines, unclosed': (
        'private_key = """\n' + "Xq7mP2vL9kR4tZ8wN3bH6jC1yF5dG0sA2eU7iO4p\n" * 25_000,
        3,
    ),
    'PASSWORD = """ and 1 MB of words a line, unclosed': (
        'PASSWORD = """\n' + "word\n" * 200_000,
        3,
    ),
    # Lists under `tokens` after a word making no credential of them (a model's or a tokenizer's
    # settings): only an element of a token's shape would be redacted (privacy28).
    "max_tokens = ['a1', 'b2'] x 15k lines": ("max_tokens = ['a1', 'b2']\n" * 15_000, 5),
    "special_tokens: ['<s>', '</s>'] x 15k lines": (
        "special_tokens: ['<s>', '</s>']\n" * 15_000,
        5,
    ),
    # One such line, as a captured value or a chunk's line: a short text runs every gated rule.
    "keys = ['name', 'email'] alone": ("keys = ['name', 'email']", 100_000),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds per case (the best is kept)")
    args = parser.parse_args()
    for label, (text, calls) in CASES.items():
        best = float("inf")
        for _ in range(args.rounds):
            start = time.process_time()
            for _ in range(calls):
                redact_secrets(text)
            best = min(best, (time.process_time() - start) / calls)
        unit, scale = ("µs", 1e6) if best < 1e-3 else ("ms", 1e3)
        print(f"{label} [{len(text)} chars]: {best * scale:.1f} {unit}")


if __name__ == "__main__":
    main()
