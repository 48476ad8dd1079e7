"""The fake Gemini server answers the real google-genai client (the basis of every Gemini test)."""

from __future__ import annotations

from google.genai import types

from app.llm.gemini import make_client
from tests.conftest import make_settings
from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer


def test_real_client_reaches_fake_with_key_and_body() -> None:
    with fake_gemini() as fake:
        fake.queue(":generateContent", FakeResponse(body=text_answer("compressed")))
        client = make_client(make_settings(gemini_api_key="test-key", gemini_base_url=fake.url))

        answer = client.models.generate_content(
            model="gemini-2.5-flash",
            contents="hello",
            config=types.GenerateContentConfig(temperature=0.2, max_output_tokens=200),
        )

        assert answer.text == "compressed"
        (call,) = fake.calls(":generateContent")
        # google-genai 3.x calls the v1 API by default; older releases used v1beta.
        assert call.path.endswith("/models/gemini-2.5-flash:generateContent")
        assert call.headers["x-goog-api-key"] == "test-key"
        assert call.body["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 200}
