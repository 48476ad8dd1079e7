"""A Gemini-compatible proxy: injects project memory and captures the model's tool calls."""

# The Gemini API's versions the proxy serves, each under `/<version>/`: its routes
# (app/proxy/routes.py) and the HEAD middleware that leaves those paths to them
# (app/api/middleware.py) read this one list.
GEMINI_API_VERSIONS = ("v1beta", "v1")
