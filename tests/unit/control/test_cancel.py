"""The cancel registry: what a cancel covers, and how long it is remembered."""

from __future__ import annotations

import pytest

from pipeline.contract.messages import CancelRequest, TranslationRequest
from pipeline.control.cancels import CancelRegistry, apply_record, cancels_for
from tests.fakes import FakeClock

HORIZON = 60_000


def request(
    rid: str = "r-1", submitted_at: int = 1_000_000, job_id: str | None = None
) -> TranslationRequest:
    return TranslationRequest(
        request_id=rid,
        source_lang="en",
        target_lang="de",
        text="x",
        submitted_at=submitted_at,
        job_id=job_id,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000)


@pytest.fixture
def registry(clock: FakeClock) -> CancelRegistry:
    return CancelRegistry(HORIZON, max_entries=100, clock=clock)


def test_request_cancel_covers_only_that_request(registry: CancelRegistry) -> None:
    (cancel,) = cancels_for(["r-1"], at=1_000_500)
    registry.add(cancel)
    assert registry.cancel_for(request("r-1")) == cancel
    assert registry.cancel_for(request("r-2")) is None


def test_job_cancel_covers_every_segment_submitted_before_it(registry: CancelRegistry) -> None:
    registry.add(CancelRequest(job_id="job-1", cancelled_at=1_000_500))
    assert registry.cancel_for(request("job-1:a:0", job_id="job-1")) is not None
    assert registry.cancel_for(request("job-1:a:1", job_id="job-1")) is not None
    assert registry.cancel_for(request("job-2:a:0", job_id="job-2")) is None
    assert registry.cancel_for(request("job-1")) is None, "a job cancel is not a request cancel"


def test_requests_submitted_after_the_cancel_are_not_covered(registry: CancelRegistry) -> None:
    """A bulk rerun reuses request ids: its fresh submissions must be translated."""
    registry.add(CancelRequest(job_id="job-1", cancelled_at=1_000_500))
    registry.add(CancelRequest(request_id="r-1", cancelled_at=1_000_500))
    assert registry.cancel_for(request("job-1:a:0", 1_000_501, job_id="job-1")) is None
    assert registry.cancel_for(request("r-1", 1_000_501)) is None
    assert registry.cancel_for(request("r-1", 1_000_500)) is not None


def test_latest_cancel_of_a_target_wins(registry: CancelRegistry) -> None:
    registry.add(CancelRequest(request_id="r-1", cancelled_at=1_000_900))
    registry.add(CancelRequest(request_id="r-1", cancelled_at=1_000_100))  # older, ignored
    assert registry.cancel_for(request("r-1", 1_000_500)) is not None


def test_cancels_expire_after_the_longest_deadline(
    registry: CancelRegistry, clock: FakeClock
) -> None:
    registry.add(CancelRequest(request_id="r-1", cancelled_at=clock.now))
    registry.add(CancelRequest(request_id="old", cancelled_at=clock.now - HORIZON))
    assert len(registry) == 1, "a cancel older than the horizon covers nothing alive"
    clock.now += HORIZON - 1
    assert registry.cancel_for(request("r-1")) is not None
    clock.now += 1
    assert registry.cancel_for(request("r-1")) is None
    assert len(registry) == 0


def test_memory_is_capped(clock: FakeClock) -> None:
    registry = CancelRegistry(HORIZON, max_entries=10, clock=clock)
    for cancel in cancels_for([f"r-{i}" for i in range(25)], at=clock.now):
        registry.add(cancel)
    assert len(registry) == 10
    assert registry.evicted == 15
    assert registry.cancel_for(request("r-24")) is not None


def test_records_tombstones_and_garbage(registry: CancelRegistry) -> None:
    (cancel,) = cancels_for(job_ids=["job-1"], at=1_000_500)
    assert cancel.key == "job:job-1"
    assert apply_record(registry, cancel.key.encode(), cancel.to_json())
    covered = request("job-1:a:0", job_id="job-1")
    assert registry.cancel_for(covered) is not None
    assert apply_record(registry, b"job:job-1", None)  # tombstone: withdrawn
    assert registry.cancel_for(covered) is None
    assert not apply_record(registry, b"r-9", b"{not json")
    assert not apply_record(registry, b"r-9", b'{"cancelled_at": 1}')  # no target


def test_a_tenants_cancel_covers_its_own_requests_only(registry: CancelRegistry) -> None:
    mine = CancelRequest(request_id="r-1", cancelled_at=1_000_500, tenant="acme")
    operator = CancelRequest(request_id="r-2", cancelled_at=1_000_500)
    assert (mine.key, operator.key) == ("tenant:acme:r-1", "r-2")
    for cancel in (mine, operator):
        assert apply_record(registry, cancel.key.encode(), cancel.to_json())
    acme = request("r-1").model_copy(update={"tenant": "acme"})
    other = request("r-1").model_copy(update={"tenant": "globex"})
    assert registry.cancel_for(acme) == mine
    assert registry.cancel_for(other) is None, "one tenant's cancel never covers another's"
    # an operator's cancel covers any tenant's request
    assert registry.cancel_for(request("r-2").model_copy(update={"tenant": "globex"})) == operator
    # a tenant's tombstone withdraws its own cancel, not an operator's of the same id
    operator_r1 = CancelRequest(request_id="r-1", cancelled_at=1_000_600)
    registry.add(operator_r1)
    assert apply_record(registry, mine.key.encode(), None)
    assert registry.cancel_for(other) == operator_r1
    assert registry.cancel_for(acme) == operator_r1


def test_a_tenants_job_cancel_is_keyed_under_the_tenant(registry: CancelRegistry) -> None:
    cancel = CancelRequest(job_id="job-1", cancelled_at=1_000_500, tenant="acme")
    assert cancel.key == "tenant:acme:job:job-1"
    apply_record(registry, cancel.key.encode(), cancel.to_json())
    segment = request("job-1:a:0", job_id="job-1")
    assert registry.cancel_for(segment.model_copy(update={"tenant": "acme"})) == cancel
    assert registry.cancel_for(segment) is None  # the default tenant's
    apply_record(registry, cancel.key.encode(), None)
    assert registry.cancel_for(segment.model_copy(update={"tenant": "acme"})) is None
