"""Deadlines: many awaits' timeouts on one timer, each at its own deadline."""

from __future__ import annotations

import asyncio

import pytest

from spacetools.toolshed.deadlines import Deadlines


async def _outcome(deadlines: Deadlines, seconds: float, gate: asyncio.Event) -> str:
    try:
        await deadlines.within(seconds, gate.wait())
    except asyncio.TimeoutError:
        return "timed out"
    return "done"


def test_each_await_times_out_at_its_own_deadline_and_the_others_go_on() -> None:
    async def scenario() -> list[str]:
        deadlines, gate = Deadlines(), asyncio.Event()
        waits = [asyncio.create_task(_outcome(deadlines, seconds, gate)) for seconds in (0.05, 3600.0, 0.1)]
        await asyncio.wait([waits[0], waits[2]])  # both short ones end, on their deadlines
        assert not waits[1].done()
        gate.set()
        return [await wait for wait in waits]

    assert asyncio.run(scenario()) == ["timed out", "done", "timed out"]


def test_a_later_await_with_an_earlier_deadline_is_not_kept_waiting() -> None:
    async def scenario() -> str:
        deadlines, gate = Deadlines(), asyncio.Event()
        long = asyncio.create_task(_outcome(deadlines, 3600.0, gate))
        await asyncio.sleep(0)  # the timer is set for the long wait first (else this hangs)
        short = await _outcome(deadlines, 0.05, gate)
        long.cancel()
        return short

    assert asyncio.run(scenario()) == "timed out"


def test_a_cancellation_from_elsewhere_is_not_a_timeout() -> None:
    async def scenario() -> None:
        deadlines = Deadlines()
        wait = asyncio.create_task(deadlines.within(60.0, asyncio.Event().wait()))
        await asyncio.sleep(0)
        wait.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wait

    asyncio.run(scenario())


def test_the_deadlines_serve_a_new_event_loop() -> None:
    deadlines = Deadlines()
    for _ in range(2):  # the first loop's timer is gone with it
        assert asyncio.run(_outcome(deadlines, 0.05, asyncio.Event())) == "timed out"
