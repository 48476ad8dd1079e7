"""The durable worker: claims compression, summaries, embeddings, purges from Postgres."""
