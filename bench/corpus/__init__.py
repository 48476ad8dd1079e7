"""A labelled relevance corpus: real memory files and transcripts plus observations written here."""
