"""The gateway against its own OpenAPI spec (schemathesis): every answer conforms, none is 5xx.

Bounded: a few generated calls per operation, on a worker and gateway of
the module's own (the demo model), so it runs in CI's ``make test``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from pipeline.gateway.process import GatewayProcess
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import WorkerProcess

pytestmark = pytest.mark.integration

LOGS = PROJECT_ROOT / "var" / "log"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def served(stack: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config: Settings = load_settings()
    files: Path = tmp_path_factory.mktemp("spec-files")
    env = {
        "BABELSTREAM_GATEWAY__INSTANCE_ID": f"spec-{uuid.uuid4().hex[:8]}",
        "BABELSTREAM_GATEWAY__FILES_DIR": str(files),
        # generated calls that wait should not hold the run up
        "BABELSTREAM_GATEWAY__WAIT_TIMEOUT_MS": "5000",
    }
    with (
        WorkerProcess(config, log_path=LOGS / "test-gateway-spec-worker.log"),
        GatewayProcess(config, log_path=LOGS / "test-gateway-spec.log", env=env) as gateway,
    ):
        yield gateway.url


@pytest.fixture(scope="module")
def api(served: str) -> Any:
    return schemathesis.openapi.from_url(f"{served}/spec")


schema = schemathesis.pytest.from_fixture("api")


@schema.parametrize()
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_every_answer_conforms_to_the_spec(case: Any, served: str) -> None:
    case.call_and_validate(base_url=served, checks=CHECKS)
