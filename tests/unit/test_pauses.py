"""Ctrl-C in a polling command lands at its pause between polls, never inside a call."""

from __future__ import annotations

import os
import signal

import pytest

from chronoctl.pauses import interrupted_at_pauses, pause


def test_a_ctrl_c_during_a_call_is_raised_at_the_next_pause_not_inside_the_call():
    finished = []
    before = signal.getsignal(signal.SIGINT)
    with interrupted_at_pauses():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # arrives "inside a database call"
            finished.append("the call")
            pause(0.01)
    assert finished == ["the call"]
    assert signal.getsignal(signal.SIGINT) is before  # the handler it replaced is back


def test_a_ctrl_c_during_a_pause_and_a_second_one_during_a_call_interrupt_at_once():
    with interrupted_at_pauses():
        with pytest.raises(KeyboardInterrupt):
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            old = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
            try:
                pause(5)
            finally:
                signal.signal(signal.SIGALRM, old)
        reached = []
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # the impatient second Ctrl-C
            reached.append("after")
        assert reached == []
