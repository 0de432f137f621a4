"""Training-loop pieces that need no training run."""

from __future__ import annotations

import os
import signal

import pytest

from posx.training.loop import StopOnInterrupt


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_requests_a_clean_stop_second_interrupts(sig):
    before = signal.getsignal(sig)
    with StopOnInterrupt() as stop:
        os.kill(os.getpid(), sig)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), sig)
    assert signal.getsignal(sig) is before
