"""Searches with the Gemini provider, through the real google-genai client and the fake server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.llm.embeddings import get_embedder
from tests.conftest import make_settings
from tests.fakes.gemini import FakeGemini, fake_gemini


def gemini_settings(fake: FakeGemini, tmp_path: Path, **overrides: Any) -> Any:
    return make_settings(
        home=tmp_path / "home",
        gemini_api_key="k",
        gemini_base_url=fake.url,
        embedding_provider="gemini",
        **overrides,
    )


def test_one_embedder_per_configuration(tmp_path: Path) -> None:
    with fake_gemini() as fake:
        settings = gemini_settings(fake, tmp_path)

        first = get_embedder(settings)

        assert get_embedder(settings.model_copy()) is first
        assert get_embedder(gemini_settings(fake, tmp_path, embedding_dims=256)) is not first
