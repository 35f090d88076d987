"""The wire contract: messages, decoding with errors as data, digests, pairs and topic names."""
