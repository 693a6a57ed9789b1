"""Adaptive publish admission: how many publishes per second a peer takes while it is busy.

Why a rate and not only a threshold
-----------------------------------
The client quotas (``runtime/quotas.py``) refuse publishes outright while the peer is clearly
saturated: its links hold thousands of frames, or its event loop lags by a tenth of a second.
Those bounds are loose on purpose (a lone garbage-collection pause must not refuse anyone), but
an event crosses several peers, and each adds its own queueing: with every peer of a busy swarm
just under a 0.1 s lag, an accepted event still takes a second or more to arrive. So the peer
also keeps an admission *rate*, adjusted by additive increase and multiplicative decrease
(AIMD, as TCP sizes its window) from the lag probe's measurements:

* a probe that finds the loop later than ``admission_target_lag_s`` cuts the rate to
  ``admission_decrease`` times what the peer actually accepted over the last probe period (not
  times the old ceiling, which may be far above the load that caused the lag), never below
  ``admission_min_rate_per_s``;
* a probe that finds it on time raises the rate by ``admission_increase_per_s`` per second, up
  to ``admission_max_rate_per_s`` (idle, the rate sits at the ceiling and refuses nothing).

Publishes over the rate (a token bucket holding ``admission_burst_s`` seconds of it) are refused
like any saturation refusal (``Overloaded`` at the client, with a retry-after), so the queue
that forms under overload stays at the publishing clients, which can wait, instead of inside
the swarm, where it delays everyone's events. Nothing here reads a clock: the peer's lag probe
passes ``now`` in.
"""

from __future__ import annotations

from dataclasses import dataclass

from rangecast.runtime.guard import TokenBucket


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """The adaptive admission rate's settings (``Quotas.admission``; docs/runtime.md lists them)."""

    #: Event-loop lag above which the rate is cut (well below ``Quotas.saturation_lag_s``).
    target_lag_s: float = 0.02
    #: The cut: the rate becomes this times the publishes/s accepted over the last period.
    decrease: float = 0.5
    #: Growth while the loop is on time, in publishes/s per second.
    increase_per_s: float = 5.0
    min_rate_per_s: float = 1.0
    max_rate_per_s: float = 10_000.0
    #: The bucket's depth, in seconds of the current rate.
    burst_s: float = 0.2

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value > 0 and value < float("inf")):
                raise ValueError(f"quotas.admission.{name}: a positive number, not {value!r}")
        if self.decrease >= 1:
            raise ValueError(f"quotas.admission.decrease must be below 1, got {self.decrease!r}")
        if self.min_rate_per_s > self.max_rate_per_s:
            raise ValueError("quotas.admission.min_rate_per_s is above max_rate_per_s")


class AdmissionRate:
    """One peer's AIMD publish rate (see the module's docstring)."""

    __slots__ = ("_accepted", "_bucket", "_since", "cfg", "cuts", "rate")

    def __init__(self, cfg: AdmissionConfig) -> None:
        self.cfg = cfg
        self.rate = cfg.max_rate_per_s
        # Starts full whatever the clock's origin: the bucket caps what it accrues.
        self._bucket = TokenBucket(self.rate, self._burst(), 0.0)
        #: Publishes accepted since the last probe, and when that period began (None: before
        #: the first probe, which only starts the first period).
        self._accepted = 0
        self._since: float | None = None
        #: How many probes cut the rate (``peer status``).
        self.cuts = 0

    def _burst(self) -> float:
        return max(self.rate * self.cfg.burst_s, 1.0)

    def allow(self, now: float) -> bool:
        """Whether one more publish fits the rate now (counted as accepted if it does)."""
        if not self._bucket.allow(now):
            return False
        self._accepted += 1
        return True

    def observe(self, lag_s: float, now: float) -> None:
        """A lag probe's result at ``now``: cut or grow the rate."""
        cfg = self.cfg
        if self._since is None:
            self._since = now
            return
        period = now - self._since
        if lag_s > cfg.target_lag_s:
            recent = self._accepted / period if period > 0 else self.rate
            self.rate = max(cfg.min_rate_per_s, min(self.rate, recent) * cfg.decrease)
            self.cuts += 1
        else:
            self.rate = min(cfg.max_rate_per_s, self.rate + cfg.increase_per_s * period)
        self._accepted = 0
        self._since = now
        bucket = self._bucket
        bucket.rate = self.rate
        bucket.burst = self._burst()
        bucket.tokens = min(bucket.tokens, bucket.burst)

    def status(self) -> dict[str, float | int]:
        return {"rate_per_s": round(self.rate, 1), "cuts": self.cuts}


__all__ = ["AdmissionConfig", "AdmissionRate"]
