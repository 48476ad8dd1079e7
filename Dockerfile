# The production image: the API (`agmem serve`) and the worker (`agmem worker`) share it.
FROM python:3.12-slim

ENV PYTHONUNBUFFERED=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PROJECT_ENVIRONMENT=/srv/agmem/.venv

RUN pip install --no-cache-dir uv

WORKDIR /srv/agmem
# Dependencies first, so code changes do not reinstall them.
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-default-groups --no-install-project

COPY alembic.ini ./
COPY alembic ./alembic
COPY app ./app
RUN uv sync --frozen --no-default-groups

RUN useradd --system --create-home agmem && mkdir -p /data && chown agmem /data
USER agmem

ENV PATH="/srv/agmem/.venv/bin:$PATH" \
    AGMEM_HOME=/data \
    AGMEM_HOST=0.0.0.0 \
    AGMEM_PORT=37777

EXPOSE 37777
HEALTHCHECK --interval=10s --timeout=3s --retries=5 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:37777/health', timeout=3)"
CMD ["agmem", "serve", "--no-worker"]
