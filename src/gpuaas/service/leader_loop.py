"""A loop the leader runs beside admission: one call of ``work(now)`` every ``interval``
seconds, in a daemon thread of its own, only while ``is_leader()`` says this process leads. A
pass that fails is logged and tried again on the next tick; :meth:`LeaderLoop.stop` waits for
the pass under way. The cluster worker and the cluster autoscaler each hold one."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class LeaderLoop:
    def __init__(
        self,
        name: str,
        interval: Callable[[], float],
        is_leader: Callable[[], bool],
        work: Callable[[float], object],
        log: logging.Logger,
    ) -> None:
        self.name = name
        self.interval = interval
        self.is_leader = is_leader
        self.work = work
        self.log = log
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval()):
            if self.is_leader():
                try:
                    self.work(time.time())
                except Exception:
                    self.log.exception("%s: pass failed; it is tried again", self.name)
