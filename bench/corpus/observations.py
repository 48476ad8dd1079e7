"""Compressed observations, session summaries and kv facts of a made-up shop backend project.

Written in the style the worker's compression produces: one tool call, what it did, what it found.
"""

from __future__ import annotations

OBSERVATIONS: list[tuple[str, str]] = [
    (
        "o01",
        "read_file app/payments/stripe_client.py: StripeClient.create_payment_intent wraps "
        "stripe.PaymentIntent.create with an idempotency key built from order_id and attempt.",
    ),
    (
        "o02",
        "run_command pytest tests/payments -q: 2 failed. stripe.error.CardError: Your card was "
        "declined (test card 4000000000000002) is not caught in checkout_service.charge_order.",
    ),
    (
        "o03",
        "edit_file app/checkout/service.py: charge_order now catches CardError and marks the "
        "order PAYMENT_FAILED instead of raising a 500.",
    ),
    (
        "o04",
        "run_command alembic upgrade head: sqlalchemy.exc.ProgrammingError: relation "
        '"order_items" does not exist; migration 0007_add_sku_index ran before 0006.',
    ),
    (
        "o05",
        "edit_file alembic/versions/0007_add_sku_index.py: set down_revision to 0006_order_items "
        "so the chain is linear again.",
    ),
    (
        "o06",
        "read_file frontend/src/hooks/useCart.ts: useCart keeps the cart in localStorage under "
        "key shop.cart.v2 and syncs it to /api/cart on login.",
    ),
    (
        "o07",
        "run_command npm run build: TypeError: Cannot read properties of undefined (reading "
        "'price') in CartSummary.tsx line 41 when the cart is empty.",
    ),
    (
        "o08",
        "edit_file frontend/src/components/CartSummary.tsx: guard against an empty items array "
        "before reducing prices; the total shows 0.00.",
    ),
    (
        "o09",
        "run_command docker compose up db: port 5432 already in use by a local postgres; "
        "changed the compose mapping to 5433:5432.",
    ),
    (
        "o10",
        "read_file app/core/config.py: Settings reads DATABASE_URL, REDIS_URL and "
        "STRIPE_SECRET_KEY; refuses to start when SECRET_KEY is the default 'changeme'.",
    ),
    (
        "o11",
        "run_command redis-cli ping: Could not connect to Redis at 127.0.0.1:6379: Connection "
        "refused. The rate limiter falls back to in-memory counters.",
    ),
    (
        "o12",
        "edit_file app/api/ratelimit.py: RateLimiter.hit uses a sliding window of 60 seconds "
        "and 100 requests per API key, stored in Redis sorted sets.",
    ),
    (
        "o13",
        "web_search 'fastapi background tasks vs celery': chose arq (asyncio Redis queue) for "
        "order confirmation emails; Celery felt heavy for two jobs.",
    ),
    (
        "o14",
        "read_file app/emails/templates/order_confirmation.html: Jinja template, uses "
        "order.number, order.total_display and a list of line items.",
    ),
    (
        "o15",
        "run_command pytest tests/emails: jinja2.exceptions.UndefinedError: 'order' has no "
        "attribute 'total_display'; the property lives on OrderView, not Order.",
    ),
    (
        "o16",
        "edit_file app/emails/render.py: render_order_confirmation now builds an OrderView "
        "before rendering, fixing the UndefinedError for total_display.",
    ),
    (
        "o17",
        "grep -rn 'TODO(auth)' app: three routes skip the ownership check: GET /orders/{id}, "
        "GET /orders/{id}/invoice and DELETE /cart/items/{item_id}.",
    ),
    (
        "o18",
        "edit_file app/api/deps.py: added require_owner dependency that compares "
        "order.customer_id with the token subject and raises 404 rather than 403 "
        "to avoid leaking ids.",
    ),
    (
        "o19",
        "read_file app/auth/jwt.py: create_access_token signs HS256 with SECRET_KEY, expiry "
        "15 minutes; refresh tokens last 30 days and are stored hashed.",
    ),
    (
        "o20",
        "run_command pytest tests/auth -k refresh: AssertionError: expected 401 for a reused "
        "refresh token, got 200; rotation does not revoke the previous token.",
    ),
    (
        "o21",
        "edit_file app/auth/refresh.py: rotate_refresh_token deletes the old token row in the "
        "same transaction and treats reuse as theft by revoking the whole family.",
    ),
    (
        "o22",
        "run_command uvicorn app.main:app --reload: WARNING: StatReload detected changes in "
        "'app/auth/refresh.py'. Reloading. Startup took 1.8s because of the product "
        "catalogue warmup.",
    ),
    (
        "o23",
        "edit_file app/catalogue/cache.py: warm_catalogue_cache runs lazily on first request "
        "instead of at startup, cutting reload time to 0.3s.",
    ),
    (
        "o24",
        "read_file app/catalogue/search.py: product search uses ILIKE '%term%' over name and "
        "description; slow on 200k products (1.2s).",
    ),
    (
        "o25",
        "run_command psql EXPLAIN ANALYZE: Seq Scan on products, 1180 ms. Added a pg_trgm GIN "
        "index on name; the same query takes 14 ms.",
    ),
    (
        "o26",
        "edit_file alembic/versions/0008_products_trgm.py: CREATE EXTENSION pg_trgm and "
        "CREATE INDEX ix_products_name_trgm USING gin (name gin_trgm_ops).",
    ),
    (
        "o27",
        "run_command pytest -x: FAILED tests/test_inventory.py::test_reserve_stock_concurrently "
        "- two workers reserved the last unit; oversold by one.",
    ),
    (
        "o28",
        "edit_file app/inventory/reserve.py: reserve_stock uses SELECT ... FOR UPDATE on the "
        "stock row so concurrent checkouts serialize; no more overselling.",
    ),
    (
        "o29",
        "read_file app/inventory/models.py: StockLevel has sku, warehouse_id, on_hand, reserved; "
        "available is on_hand minus reserved.",
    ),
    (
        "o30",
        "run_command ruff check .: F401 'typing.Optional' imported but unused in "
        "app/orders/schemas.py; B008 function call in default argument in "
        "app/api/routes/orders.py.",
    ),
    (
        "o31",
        "edit_file pyproject.toml: enabled ruff rules E,W,F,I,B,UP and mypy strict for app/; "
        "added a Makefile lint target.",
    ),
    (
        "o32",
        "run_command mypy --strict app: error: Returning Any from function declared to return "
        '"Decimal" in app/pricing/tax.py:27.',
    ),
    (
        "o33",
        "edit_file app/pricing/tax.py: compute_vat returns Decimal quantized to 0.01 with "
        "ROUND_HALF_UP; German VAT 19%, reduced 7% for books.",
    ),
    (
        "o34",
        "read_file docs/adr/0003-money-as-decimal.md: money is stored as NUMERIC(12,2) and "
        "handled as Decimal everywhere; floats are forbidden in pricing code.",
    ),
    (
        "o35",
        "run_command pytest tests/pricing: test_vat_rounding failed, 0.005 rounded down because "
        "Python's round() uses banker's rounding.",
    ),
    (
        "o36",
        "web_fetch https://docs.stripe.com/webhooks/signatures: verify the Stripe-Signature "
        "header with the endpoint secret and a 5 minute tolerance.",
    ),
    (
        "o37",
        "edit_file app/payments/webhooks.py: handle_stripe_webhook verifies the signature, "
        "ignores duplicate event ids and marks orders PAID on payment_intent.succeeded.",
    ),
    (
        "o38",
        "run_command stripe listen --forward-to localhost:8000/webhooks/stripe: events arrive; "
        "charge.refunded is not handled yet.",
    ),
    (
        "o39",
        "edit_file app/payments/webhooks.py: charge.refunded sets the order to REFUNDED and "
        "restocks the items through inventory.release_stock.",
    ),
    (
        "o40",
        "read_file .github/workflows/ci.yml: CI runs ruff, mypy and pytest against postgres:16 "
        "service container; no caching of the uv environment.",
    ),
    (
        "o41",
        "edit_file .github/workflows/ci.yml: added astral-sh/setup-uv with cache enabled; CI "
        "time went from 6m10s to 2m40s.",
    ),
    (
        "o42",
        "run_command gh run view --log-failed: tests/test_search.py timed out after 120s on CI "
        "because the trigram index was missing in the test database.",
    ),
    (
        "o43",
        "edit_file tests/conftest.py: the test database is migrated with alembic upgrade head "
        "once per session instead of Base.metadata.create_all, so indexes exist in tests.",
    ),
    (
        "o44",
        "read_file frontend/src/pages/Checkout.tsx: the checkout page posts to /api/checkout and "
        "redirects to /orders/:id/thanks; errors show a toast.",
    ),
    (
        "o45",
        "run_command npx playwright test checkout.spec.ts: timeout waiting for selector "
        "[data-testid=pay-button]; the button renders only after the address form validates.",
    ),
    (
        "o46",
        "edit_file frontend/tests/checkout.spec.ts: fill the address form before waiting for "
        "the pay button; e2e checkout passes in 9 seconds.",
    ),
    (
        "o47",
        "read_file app/orders/state.py: order states CREATED -> PAYMENT_PENDING -> PAID -> "
        "SHIPPED -> DELIVERED, plus PAYMENT_FAILED, CANCELLED, REFUNDED.",
    ),
    (
        "o48",
        "edit_file app/orders/state.py: transition() raises InvalidTransition for SHIPPED -> "
        "CANCELLED; cancelling after shipping needs a return instead.",
    ),
    (
        "o49",
        "run_command curl -X POST /api/orders/42/cancel: 409 Conflict InvalidTransition "
        "SHIPPED -> CANCELLED, as intended.",
    ),
    (
        "o50",
        "read_file app/shipping/dhl.py: DHLClient.create_label posts to the DHL Parcel DE API "
        "with basic auth and returns a PDF label URL.",
    ),
    (
        "o51",
        "run_command pytest tests/shipping: httpx.ReadTimeout after 5s calling the DHL sandbox; "
        "their sandbox is slow in the morning.",
    ),
    (
        "o52",
        "edit_file app/shipping/dhl.py: timeout raised to 20s with 3 retries and exponential "
        "backoff via tenacity for create_label.",
    ),
    (
        "o53",
        "read_file README.md: setup is uv sync, docker compose up db redis, make migrate, make "
        "run; the admin user comes from make seed.",
    ),
    (
        "o54",
        "edit_file app/cli/seed.py: seed command creates admin@example.com with a random "
        "password printed once, plus 50 demo products.",
    ),
    (
        "o55",
        "run_command make seed: IntegrityError duplicate key value violates unique constraint "
        '"uq_users_email" when run twice; seed is not idempotent.',
    ),
    (
        "o56",
        "edit_file app/cli/seed.py: seed upserts the admin user with ON CONFLICT (email) DO "
        "NOTHING so running it twice is safe.",
    ),
    (
        "o57",
        "read_file app/api/routes/products.py: list_products paginates with limit/offset; "
        "offset 10000 takes 400 ms.",
    ),
    (
        "o58",
        "edit_file app/api/routes/products.py: switched to keyset pagination on (created_at, "
        "id) with an opaque cursor parameter.",
    ),
    (
        "o59",
        "run_command locust -f load/checkout.py -u 200: p95 checkout latency 850 ms; the "
        "bottleneck is the synchronous VAT lookup per line item.",
    ),
    (
        "o60",
        "edit_file app/pricing/tax.py: cache VAT rates per country in a module-level dict "
        "loaded at startup; checkout p95 down to 210 ms.",
    ),
    (
        "o61",
        "read_file app/logging.py: structlog with JSON output in production and console "
        "renderer in development; request_id bound per request by middleware.",
    ),
    ("o62", "run_command docker logs shop-api: sentry_sdk: DSN not set, error reporting disabled."),
    (
        "o63",
        "edit_file app/main.py: initialise Sentry only when SENTRY_DSN is set, with "
        "traces_sample_rate 0.1 in production.",
    ),
    (
        "o64",
        "read_file app/customers/gdpr.py: export_customer_data zips orders, addresses and "
        "consents as JSON; delete_customer anonymises orders instead of deleting them.",
    ),
    (
        "o65",
        "run_command pytest tests/customers: test_delete_customer_keeps_invoices passes; "
        "invoices keep the billing name for tax law (10 years retention).",
    ),
    (
        "o66",
        "edit_file app/api/routes/admin.py: admin endpoints require role=admin in the JWT "
        "claims; added audit log rows for every admin action.",
    ),
    (
        "o67",
        "read_file frontend/vite.config.ts: dev server proxies /api to localhost:8000; build "
        "output goes to frontend/dist served by nginx.",
    ),
    (
        "o68",
        "run_command npm run test: vitest 42 passed; coverage 71% statements, CartSummary "
        "and useCart at 95%.",
    ),
    (
        "o69",
        "edit_file nginx/shop.conf: gzip on, cache static assets for 1 year with immutable, "
        "SPA fallback try_files $uri /index.html.",
    ),
    (
        "o70",
        "run_command certbot renew --dry-run: success; certificates for shop.example.com renew "
        "automatically via systemd timer.",
    ),
    (
        "o71",
        "read_file app/discounts/coupons.py: apply_coupon supports percent and fixed coupons, "
        "one per order, min basket 20 EUR, expires_at checked in UTC.",
    ),
    (
        "o72",
        "run_command pytest tests/discounts: test_coupon_expiry_timezone failed; expires_at was "
        "compared with a naive datetime.now().",
    ),
    (
        "o73",
        "edit_file app/discounts/coupons.py: use datetime.now(UTC) everywhere; naive datetimes "
        "are rejected by a pydantic validator.",
    ),
    (
        "o74",
        "web_search 'postgres advisory lock python': use pg_try_advisory_xact_lock to make the "
        "nightly invoice export run once across replicas.",
    ),
    (
        "o75",
        "edit_file app/jobs/invoice_export.py: nightly export takes pg_try_advisory_xact_lock"
        "(4242) and writes invoices to S3 bucket shop-invoices as PDF.",
    ),
    (
        "o76",
        "run_command aws s3 ls s3://shop-invoices/2026/03/: AccessDenied; the task role lacks "
        "s3:PutObject on the bucket.",
    ),
    (
        "o77",
        "edit_file infra/iam.tf: granted s3:PutObject and s3:GetObject on "
        "arn:aws:s3:::shop-invoices/* to the ecs task role.",
    ),
    (
        "o78",
        "read_file app/search/suggest.py: autocomplete returns 8 product names by trigram "
        "similarity above 0.3, debounced 150 ms on the client.",
    ),
    (
        "o79",
        "run_command pytest --durations=5: slowest test is test_full_checkout_flow at 3.2s "
        "because it renders the PDF invoice with weasyprint.",
    ),
    (
        "o80",
        "edit_file tests/conftest.py: a fixture replaces weasyprint rendering with a tiny "
        "fixed PDF in unit tests; the suite runs in 41s instead of 78s.",
    ),
]

SUMMARIES: list[tuple[str, str, str]] = [
    (
        "s01",
        "Fix failing card payments",
        "Card declines raised 500s in checkout. charge_order now "
        "catches CardError and marks orders PAYMENT_FAILED; Stripe idempotency keys reviewed.",
    ),
    (
        "s02",
        "Repair migrations",
        "Alembic chain was forked (0007 before 0006). Fixed down_revision; "
        "added a pg_trgm index for product search, 1180 ms to 14 ms.",
    ),
    (
        "s03",
        "Secure orders API",
        "Three routes lacked ownership checks. Added require_owner "
        "(404 not 403). Refresh token rotation now revokes the token family on reuse.",
    ),
    (
        "s04",
        "Stop overselling",
        "Concurrent checkouts oversold the last unit. reserve_stock locks "
        "the stock row with FOR UPDATE; added a concurrency test.",
    ),
    (
        "s05",
        "Money and VAT",
        "Decimal everywhere per ADR 0003. compute_vat quantizes with "
        "ROUND_HALF_UP; VAT rates cached per country, checkout p95 850 to 210 ms.",
    ),
    (
        "s06",
        "Stripe webhooks",
        "Webhook signature verification, duplicate event ids ignored, "
        "payment_intent.succeeded marks PAID, charge.refunded restocks items.",
    ),
    (
        "s07",
        "CI speed",
        "setup-uv with cache cut CI from 6m10s to 2m40s; tests now migrate with "
        "alembic so the trigram index exists.",
    ),
    (
        "s08",
        "Shipping labels",
        "DHL sandbox timeouts: create_label has a 20s timeout and tenacity retries.",
    ),
    (
        "s09",
        "Seed and pagination",
        "make seed is idempotent (ON CONFLICT DO NOTHING); products "
        "list uses keyset pagination with a cursor.",
    ),
    (
        "s10",
        "Invoices to S3",
        "Nightly invoice export guarded by an advisory lock; IAM role got "
        "s3:PutObject on shop-invoices.",
    ),
]

KV: list[tuple[str, str]] = [
    ("project.stack", "FastAPI, SQLAlchemy 2, Postgres 16, Redis, arq, React + Vite frontend"),
    ("project.test_command", "uv run pytest -q; frontend: npm run test; e2e: npx playwright test"),
    ("project.deploy", "ECS Fargate behind nginx; certificates by certbot systemd timer"),
    ("project.money", "Decimal and NUMERIC(12,2) only; never float for prices"),
    (
        "project.payments",
        "Stripe PaymentIntents with idempotency keys; webhooks at /webhooks/stripe",
    ),
    ("project.queue", "arq workers for emails and the nightly invoice export"),
    ("current.focus", "coupon expiry bug and timezone-aware datetimes"),
    ("current.branch", "fix/coupon-utc"),
    ("current.blocker", "DHL sandbox slow in the morning; retries added"),
    ("project.db_port", "local docker postgres mapped to 5433 because 5432 is taken"),
]
