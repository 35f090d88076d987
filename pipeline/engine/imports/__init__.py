"""Model imports: Argos packages, OPUS-MT releases and Hugging Face names to registry
entries (``babelstream models add``; :mod:`.install` says the steps)."""
