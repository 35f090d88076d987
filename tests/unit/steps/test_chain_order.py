"""A chain checks at start that each step reads only what the batch brings or an earlier
step sets: a step placed too early would find nothing to work on and do nothing."""

from __future__ import annotations

import pytest

from pipeline.contract.pairs import Pair
from pipeline.routing import Router
from pipeline.settings import LimitSettings
from pipeline.steps.base import ChainOrderError, check_order
from pipeline.steps.cache import CacheLookup
from pipeline.steps.chains import routing_steps
from pipeline.steps.deadline import Deadline
from pipeline.steps.decode import Decode
from pipeline.steps.emit import Emit
from pipeline.steps.isolation import Chain
from pipeline.steps.publish import Publish
from pipeline.steps.replies import ReplyCopies
from pipeline.steps.resolve import Resolve

LIMITS = LimitSettings()


def serves(pair: Pair) -> bool:
    return True


def test_a_lookup_before_decode_is_refused_at_start():
    with pytest.raises(ChainOrderError, match=r"CacheLookup reads digest, .*before it: nothing"):
        check_order([CacheLookup(None), Decode(LIMITS, serves)])  # type: ignore[arg-type]


def test_a_deadline_before_decode_is_refused_naming_what_ran_before():
    with pytest.raises(ChainOrderError, match=r"Deadline reads request"):
        Chain(decide=(Deadline(1000), Decode(LIMITS, serves)), publish=())


def test_publishing_before_anything_is_emitted_is_refused():
    with pytest.raises(ChainOrderError, match=r"Publish reads outgoing"):
        Chain(decide=(Decode(LIMITS, serves),), publish=(Publish(None), Emit()))  # type: ignore[arg-type]


def test_results_resolved_without_a_translation_step_are_refused():
    with pytest.raises(ChainOrderError, match=r"Resolve reads translation"):
        check_order([Decode(LIMITS, serves), Resolve()])


def test_the_routers_chain_is_in_order():
    chain = routing_steps(
        router=Router(lambda pair: None, LIMITS),
        limits=LIMITS,
        quarantine=None,  # type: ignore[arg-type]
        control_wait_s=1.0,
        producer=None,  # type: ignore[arg-type]
        totals=None,  # type: ignore[arg-type]
        replies=ReplyCopies(None, None, 1.0),  # type: ignore[arg-type]
    )
    assert [type(s).__name__ for s in chain.decide] == ["Quarantine", "Route"]
