"""The parts of `agmem serve`'s HTTP/1.1 protocol (app/cli/wire.py) by concern: its answers'
texts and refusals (answers.py), a chunked body's framing (framing.py), the request line read
where its message begins (lines.py) and the trusted proxies' `X-Forwarded-Host` (proxies.py).
"""
