"""The HTTP API reference page shows every route of the gateway with its answers."""

from __future__ import annotations

from docsgen.reference import http_api_page
from pipeline.gateway.app import create_app
from pipeline.settings import Settings


def test_every_route_and_answer_of_the_gateway_is_on_the_page() -> None:
    spec = create_app(Settings()).openapi()
    page = http_api_page(spec)
    sections = page.split("\n## ")
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            (section,) = [s for s in sections if s.startswith(f"`{method.upper()} {path}`")]
            for status in operation["responses"]:
                assert f"| `{status}` |" in section, (method, path, status)
    assert "`GET /babelstream/ready`" in page and "(extension)" in page
