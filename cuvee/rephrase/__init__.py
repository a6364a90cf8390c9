"""LLM rewriting of documents (``cuvee rephrase``): Nemotron-CC-style synthetic variants as a new mix source."""
