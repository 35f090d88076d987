"""The translation caches (in-process LRU, Redis) and the Redis client."""
