"""Admission by the event loop's lag (swarm_app/coordinator/admission.py): a process whose loop
is behind answers database requests ``busy``, and takes them again once it has caught up."""

from __future__ import annotations

import asyncio
import time

import pytest

from swarm_app.coordinator.admission import Admission
from worker.shared.protocol import ErrorCode, ProtocolError


def test_a_loop_running_late_refuses_until_it_catches_up(settings):
    settings.WORKER_BUSY_LOOP_LAG_MS = 100
    admission = Admission()

    async def scenario() -> tuple[ProtocolError, float]:
        admission.admit()  # on time: taken (and the lag timer starts)
        await asyncio.sleep(0.2)
        time.sleep(0.3)  # noqa: ASYNC251 -- holding the loop is the point: every frame read now waits this long
        with pytest.raises(ProtocolError) as refused:
            admission.admit()
        await asyncio.sleep(0)  # the overdue tick runs: the lateness is remembered, decaying
        with pytest.raises(ProtocolError):
            admission.admit()
        await asyncio.sleep(0.5)  # caught up
        admission.admit()
        return refused.value, admission.loop_lag.lag()

    refused, lag_after = asyncio.run(scenario())
    assert refused.code == ErrorCode.BUSY
    assert 1.0 <= refused.data["retry_after"] <= Admission.MAX_WAIT
    assert lag_after < 0.1


def test_the_lag_signal_is_off_at_zero(settings):
    settings.WORKER_BUSY_LOOP_LAG_MS = 0
    admission = Admission()

    async def scenario() -> None:
        admission.admit()
        time.sleep(0.3)  # noqa: ASYNC251 -- the loop held, as above
        admission.admit()  # taken: only the database queue counts

    asyncio.run(scenario())
