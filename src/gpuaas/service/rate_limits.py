"""Request rate limits and back-off on failed authentication.

Three rules, each answering 429 with ``Retry-After`` (whole seconds, at least 1):

- **Per token**: at most ``per_token`` authenticated requests a second for one token (keyed by
  the token's hash, never the token). One script cannot take the API from its own tenant's
  other users.
- **Per tenant**: at most ``per_tenant`` requests a second under ``/v1/tenants/{tenant}/...``,
  whatever token makes them, so one tenant's tokens together cannot take the API from others.
- **Failed authentication**: a client (its address) may present ``free_failures`` unknown
  tokens (a revoked or expired one is not a guess: it stays a plain 401)
  in ``failure_window`` seconds; after that every further attempt with a token is refused
  without looking the token up, for a time that doubles with each failure (1 s, 2 s, 4 s, ...
  up to ``max_backoff``). A good token does not lift a back-off in force (a guesser with one
  valid token of its own would otherwise reset the count); the back-off ends when its time
  runs out and the count when ``failure_window`` passes without a failure. A request with no
  token is not an attempt (it guesses nothing) and is answered 401 as before.

The rates are token buckets in memory (:class:`Buckets`), per server process, which is where
the work they protect is done: a key may spend ``limit`` requests at once and earns them back at
``limit / window`` a second. A zero limit turns its rule off. (The ``limits`` library's sliding
window did the same at a third of the API's submission throughput: a lock, datetime arithmetic and
a storage layer per hit, on the event loop that runs SQLite submissions.)
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from gpuaas.service.errors import ApiError


@dataclass(frozen=True, slots=True)
class RateLimitSettings:
    per_token: int = 2000
    per_tenant: int = 5000
    free_failures: int = 10
    failure_window: float = 600.0
    max_backoff: float = 300.0
    #: the rates' window in seconds (``per_token`` requests per ``window`` seconds)
    window: int = 1


class TooManyRequests(ApiError):
    def __init__(self, detail: str, retry_after: float) -> None:
        super().__init__(429, detail)
        self.retry_after = max(1, math.ceil(retry_after))


class Buckets:
    """Token buckets per key: ``limit`` requests at once, earned back at ``limit / window`` a
    second. O(1) a hit; buckets that are full again are forgotten when there are many."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self._rate = limit / window
        self._lock = threading.Lock()
        self._state: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: str, now: float) -> float:
        """0 when a request may go now, else the seconds until it may."""
        with self._lock:
            tokens, at = self._state.get(key, (float(self.limit), now))
            tokens = min(float(self.limit), tokens + (now - at) * self._rate)
            if tokens >= 1.0:
                self._state[key] = (tokens - 1.0, now)
                if len(self._state) > 100_000:
                    self._forget(now)
                return 0.0
            self._state[key] = (tokens, now)
            return (1.0 - tokens) / self._rate

    def _forget(self, now: float) -> None:
        full = [
            k for k, (t, at) in self._state.items() if t + (now - at) * self._rate >= self.limit
        ]
        for key in full:
            del self._state[key]


class RateLimits:
    def __init__(self, settings: RateLimitSettings) -> None:
        self.settings = settings
        w = settings.window
        self._token = Buckets(settings.per_token, w) if settings.per_token else None
        self._tenant = Buckets(settings.per_tenant, w) if settings.per_tenant else None
        self._lock = threading.Lock()
        #: client -> (failures in the window, time of the last failure, back-off until)
        self._failures: dict[str, tuple[int, float, float]] = {}

    # --- request rates ------------------------------------------------------------------------
    def _hit(self, buckets: Buckets | None, key: str, what: str) -> None:
        if buckets is None:
            return
        wait = buckets.take(key, time.monotonic())
        if wait > 0:
            raise TooManyRequests(
                f"too many requests for {what}: at most {buckets.limit} in {buckets.window:g} s",
                wait,
            )

    def token(self, token_hash: str) -> None:
        self._hit(self._token, token_hash, "this token")

    def tenant(self, tenant: str) -> None:
        self._hit(self._tenant, tenant, f"tenant {tenant}")

    # --- failed authentication ------------------------------------------------------------------
    def check_client(self, client: str, now: float) -> None:
        """429 while ``client`` is backed off; called before a token is looked up."""
        with self._lock:
            found = self._failures.get(client)
        if found is not None and found[2] > now:
            raise TooManyRequests(
                "too many failed authentications from this client: wait before trying again",
                found[2] - now,
            )

    def failed(self, client: str, now: float) -> None:
        s = self.settings
        if not s.free_failures:
            return
        with self._lock:
            count, last, _ = self._failures.get(client, (0, now, 0.0))
            if now - last > s.failure_window:
                count = 0
            count += 1
            over = count - s.free_failures
            until = now + min(s.max_backoff, 2.0 ** (over - 1)) if over > 0 else 0.0
            self._failures[client] = (count, now, until)
            if len(self._failures) > 100_000:  # forget the oldest quiet clients
                cutoff = now - s.failure_window
                for key in [k for k, v in self._failures.items() if v[1] < cutoff and v[2] < now]:
                    del self._failures[key]
