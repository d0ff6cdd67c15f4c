"""The daemon's timing: one step every delta until stopped, and the signals.

`Loop.run` calls `start`, then `step` once every `delta()` seconds of its clock (the
baseline sample, or the previous step, began the interval, so every step covers one
delta of consumption), then `shutdown`, which always runs.  SIGTERM and SIGINT stop
it after the current step; SIGHUP calls the daemon's `on_hup` (a tree reload) and
wakes it.  The clock is injected (fairshare.daemon.daemon.Clock), so the simulator runs the
same loop on simulated seconds without sleeping.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

log = logging.getLogger("shrdaemon")


class Loop:
    """A step every delta on `clock` until `stop`; `wake` cuts a sleep short; `on_hup`
    is called on SIGHUP."""

    def __init__(self, clock, on_hup: Callable[[], None]) -> None:
        self.clock = clock
        self.wake = threading.Event()
        self.stopping = False
        self._on_hup = on_hup

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop the loop, SIGHUP calls `on_hup` (main thread only)."""
        signal.signal(signal.SIGTERM, self._stop_signal)
        signal.signal(signal.SIGINT, self._stop_signal)
        signal.signal(signal.SIGHUP, self.hup)

    def _stop_signal(self, signum, _frame) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        self.stop()

    def hup(self, signum=signal.SIGHUP, _frame=None) -> None:
        """SIGHUP: call `on_hup` and wake the loop."""
        self._on_hup()
        self.wake.set()

    def stop(self) -> None:
        """Ask the loop to stop after the current step (safe from signal handlers)."""
        self.stopping = True
        self.wake.set()

    def run(
        self,
        cycles: int | None,
        start: Callable[[], None],
        step: Callable[[], None],
        shutdown: Callable[[], None],
        delta: Callable[[], float],
    ) -> int:
        """`start`, then `cycles` steps (None: until stopped), then `shutdown`; returns
        the steps run."""
        done = 0
        try:
            start()
            began = self.clock.monotonic()
            while not self.stopping and (cycles is None or done < cycles):
                delay = delta() - (self.clock.monotonic() - began)
                if delay > 0:
                    self.wake.clear()
                    if self.stopping:
                        break
                    self.clock.sleep(delay, self.wake)
                    if self.stopping:
                        break
                began = self.clock.monotonic()
                step()
                done += 1
        finally:
            shutdown()
        return done
