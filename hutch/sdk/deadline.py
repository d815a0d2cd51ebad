"""A call's own time limit (`timeout=` in seconds on the data-plane calls): one budget for the whole
call, its retries and a token refresh included, as a transform of its flow.

Every request the call makes waits (to connect, to send, for each read of the answer) at most what
is left of the budget, and a retry or its pause that would start past it is not made: the call
raises SandboxTimeoutError (code request_timeout) instead. An answer that keeps arriving is not cut
off mid-way: the budget bounds each wait, as httpx's timeouts do.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import TypeVar

import httpx

from hutch.sdk.codes import SdkCode
from hutch.sdk.errors import SandboxTimeoutError, ValidationError
from hutch.sdk.flow import Call, Flow, Instruction, Sleep

T = TypeVar("T")


def check_timeout(seconds: float | None) -> None:
    """Refuse a timeout that is not a positive, finite number of seconds (before any request)."""
    if seconds is None:
        return
    if type(seconds) not in (int, float) or not (math.isfinite(seconds) and seconds > 0):
        raise ValidationError(f"timeout is a positive number of seconds, not {seconds!r}",
                              code=SdkCode.INVALID_ARGUMENT)


def within(seconds: float | None, flow: Flow[T]) -> Flow[T]:
    """`flow`, done within `seconds` (None: the defaults of each request, and its retries)."""
    check_timeout(seconds)
    if seconds is None:
        return (yield from flow)
    deadline = time.monotonic() + seconds
    error: BaseException | None = None  # the last thing the runner threw into the flow
    try:
        step = next(flow)
        while True:
            bounded = _bounded(step, deadline - time.monotonic())
            if bounded is None:
                raise SandboxTimeoutError(f"the call did not finish within its timeout of {seconds:g} s",
                                          code=SdkCode.REQUEST_TIMEOUT) from error
            try:
                answer, error = (yield bounded), None
            except GeneratorExit:
                raise
            except BaseException as e:  # a request's timeout or broken connection: the flow may retry
                error = e
                step = flow.throw(e)
            else:
                step = flow.send(answer)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        flow.close()


def _bounded(step: Instruction, left: float) -> Instruction | None:
    """The step, waiting at most `left` seconds; None if it cannot (nothing left, or a pause longer)."""
    if left <= 0 or (isinstance(step, Sleep) and step.seconds >= left):
        return None
    if isinstance(step, Call):
        return dataclasses.replace(step, timeout=httpx.Timeout(left))
    return step
