"""A Gemini-compatible proxy: injects project memory and captures the model's tool calls."""
