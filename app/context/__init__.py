"""The context builder: recent sessions, relevant memory and kv facts fitted to a token budget."""
