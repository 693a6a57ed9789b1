"""What expiring stored pieces costs a tree host (pubsub.expiry): its timer wheel against the
plain scan of every piece at every sweep it replaces.

A host holds P pieces, each refreshed by its live subscriber every ``refresh_s`` (30 s) at a
random phase, except a fraction whose subscribers are gone; expiry after 90 s, a sweep every
15 s, for ``--periods`` refresh periods of simulated time. Measured on one core: the time of all
refreshes (``touch``) and of all sweeps, per piece per refresh period, for the wheel and for a
scan (a dictionary of last refreshes, every entry checked at every sweep), and the longest single
sweep of each (how long it holds the event loop). Usage::

    .venv/bin/python bench/expiry_sweep.py                 # P = 10^4, 10^5, 10^6
    .venv/bin/python bench/expiry_sweep.py --pieces 100000

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

from rangecast.pubsub.expiry import Entry, ExpiryQueue
from rangecast.pubsub.space import TreeId

REFRESH_S = 30.0
EXPIRE_S = 90.0
SWEEP_S = REFRESH_S / 2


def _entries(n: int) -> list[Entry]:
    key = ("thesis", TreeId(0, 3, 5))
    return [(key, i.to_bytes(20, "big"), i & 0xFFFF, 0, 0) for i in range(n)]


def _schedule(n: int, dead: float, periods: int, rng: random.Random) -> list[tuple[float, int]]:
    """(time, piece) of every refresh: live pieces every period at their phase; dead ones
    once, at the start."""
    out = []
    for i in range(n):
        phase = rng.uniform(0.0, REFRESH_S)
        last = 1 if rng.random() < dead else periods
        out += [(phase + k * REFRESH_S, i) for k in range(last)]
    out.sort()
    return out


def run(n: int, dead: float, periods: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    entries = _entries(n)
    refreshes = _schedule(n, dead, periods, rng)
    end = periods * REFRESH_S
    sweeps = [SWEEP_S * (k + 1) for k in range(int(end / SWEEP_S))]

    def drive(touch: Any, sweep: Any) -> tuple[float, float, int, float]:
        t_touch = t_sweep = longest = 0.0
        expired = 0
        r = 0
        for at in sweeps:
            t0 = time.perf_counter()
            while r < len(refreshes) and refreshes[r][0] <= at:
                touch(entries[refreshes[r][1]], refreshes[r][0])
                r += 1
            t1 = time.perf_counter()
            expired += len(sweep(at))
            took = time.perf_counter() - t1
            t_sweep += took
            longest = max(longest, took)
            t_touch += t1 - t0
        return t_touch, t_sweep, expired, longest

    q = ExpiryQueue(EXPIRE_S)
    wheel = drive(q.touch, q.due)

    last: dict[Entry, float] = {}

    def scan_touch(e: Entry, now: float) -> None:
        last[e] = now

    def scan_due(now: float) -> list[Entry]:
        out = [e for e, t in last.items() if t + EXPIRE_S <= now]
        for e in out:
            del last[e]
        return out

    scan = drive(scan_touch, scan_due)
    scan_touch_s = drive(scan_touch, lambda now: [])[0]  # the dictionary writes alone
    per = n * periods

    def us(x: float) -> float:
        return round(x / per * 1e6, 3)

    return {
        "pieces": n,
        "dead_fraction": dead,
        "refresh_periods": periods,
        "expired_wheel": wheel[2],
        "expired_scan": scan[2],
        "wheel_touch_us_per_piece_period": us(wheel[0]),
        "dict_write_us_per_piece_period": us(scan_touch_s),
        "wheel_sweep_us_per_piece_period": us(wheel[1]),
        "scan_sweep_us_per_piece_period": us(scan[1]),
        "wheel_longest_sweep_ms": round(wheel[3] * 1e3, 3),
        "scan_longest_sweep_ms": round(scan[3] * 1e3, 3),
        "wheel_buckets_at_end": len(q._buckets),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pieces", type=int, action="append", help="pieces held (repeatable)")
    ap.add_argument("--dead", type=float, default=0.1, help="fraction of gone subscribers")
    ap.add_argument("--periods", type=int, default=8, help="refresh periods simulated")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    sizes = args.pieces or [10_000, 100_000, 1_000_000]
    print(json.dumps([run(n, args.dead, args.periods, args.seed) for n in sizes], indent=1))


if __name__ == "__main__":
    main()
