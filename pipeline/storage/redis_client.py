"""The one way the project opens a Redis connection: URL, ACL user, password and TLS from settings.

TLS is on for a ``rediss://`` URL; the CA (and a client certificate, when
the server asks for one) come from :class:`RedisSettings`.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio

from pipeline.settings import RedisSettings


def redis_options(settings: RedisSettings) -> dict[str, Any]:
    """Keyword arguments for ``redis.Redis.from_url(settings.url, ...)``."""
    options: dict[str, Any] = {
        "username": settings.username,
        "password": settings.password.get_secret_value() if settings.password else None,
        "socket_timeout": settings.socket_timeout_s,
        "socket_connect_timeout": settings.socket_timeout_s,
    }
    if settings.uses_tls:
        options.update(
            ssl_ca_certs=str(settings.ssl_ca_certs) if settings.ssl_ca_certs else None,
            ssl_certfile=str(settings.ssl_certfile) if settings.ssl_certfile else None,
            ssl_keyfile=str(settings.ssl_keyfile) if settings.ssl_keyfile else None,
            ssl_check_hostname=settings.ssl_check_hostname,
        )
    return options


def redis_client(settings: RedisSettings) -> redis.Redis:
    """A client for ``settings.url`` (the caller closes it)."""
    return redis.Redis.from_url(settings.url, **redis_options(settings))


def async_redis_client(
    settings: RedisSettings, *, timeout_s: float | None = None, max_connections: int = 32
) -> redis.asyncio.Redis:
    """An asyncio client for ``settings.url`` (the caller closes it with ``aclose``).

    ``timeout_s`` replaces the settings' socket timeout (a busy event loop needs
    longer than the worker's cache does). The pool holds at most
    ``max_connections``; a burst of callers waits for a free one instead of
    failing with "Too many connections".
    """
    options = redis_options(settings)
    if timeout_s is not None:
        options.update(socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        settings.url,
        max_connections=max_connections,
        timeout=options["socket_timeout"],
        **options,
    )
    return redis.asyncio.Redis(connection_pool=pool)
