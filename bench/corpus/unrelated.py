"""Prompts about nothing in the corpus, for the context builder's relevance gate.

A coding agent's turns include chit-chat ("ok", "thanks") and questions the project's memory
cannot answer. The context block is injected into each of them, so whatever it adds for these
is noise. Written for this benchmark; none of them is about the corpus's shop, agents or tools.
"""

from __future__ import annotations

UNRELATED: list[str] = [
    "write a haiku about autumn leaves",
    "what is the capital of Australia",
    "give me a recipe for banana bread",
    "how many moons does Jupiter have",
    "translate good morning into Japanese",
    "thanks, that's all for today",
    "explain the rules of cricket",
    "recommend a good science fiction novel",
    "what's the weather like in Lisbon in March",
    "how do I train for a marathon",
    "summarize the plot of Hamlet",
    "what is the boiling point of water at altitude",
    "who painted the Mona Lisa",
    "plan a three day trip to Kyoto",
    "how do I center a div with flexbox",
    "write a limerick about a cat",
    "what are good exercises for lower back pain",
    "explain quantum entanglement simply",
    "convert 70 fahrenheit to celsius",
    "list the planets in order from the sun",
    "how do vaccines work",
    "tell me a joke",
    "what is the difference between a violin and a viola",
    "how to make cold brew coffee",
    "describe the water cycle for a ten year old",
    "what year did the Berlin wall fall",
    "suggest names for a golden retriever puppy",
    "how do I repot a cactus",
    "what is the speed of light in a vacuum",
    "compose a short poem about the sea",
    "how do I write a cover letter",
    "which chess opening is best for beginners",
    "what do pandas eat",
    "explain how a rainbow forms",
    "how to knit a scarf",
    "what is the tallest mountain in Africa",
    "ok",
    "continue",
    "hello",
    "what time zone is New Zealand in",
]
