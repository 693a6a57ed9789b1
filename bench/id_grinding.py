"""What it costs to choose where an id lands, without and with the id puzzle (runtime.identity).

An attacker grinds Ed25519 keys until one's id (SHA-1 of the key) lands where it wants; with the
puzzle at ``d`` bits a key must also solve the puzzle, which one key in 2^d does, independently
of where its id falls. Two goals, in a swarm of N peers with uniformly random ids:

- **take over a chosen key**: be its root, i.e. closer to it (ring distance, Pastry's root)
  than every one of the N peers. The gap around a key is a Beta(1, N) fraction of the ring, so
  P(more than t keys) = N / (N + t / 2^d): the median is N * 2^d keys, the 90th percentile
  9 N * 2^d; the mean is unbounded (rare tiny gaps), so the median is what "about N" means.
- **land in a given peer's leaf set** (l = 16: the 8 nearest on each side): the region is 16
  gaps, a Gamma(16, N) fraction, so P(more than t) = (N / (N + t / 2^d))^16; expected keys
  N * 2^d / 15, median N * 2^d * (2^(1/16) - 1).

Measured here: keys per second on one core (key pair, id, puzzle check), the seconds an honest
peer spends on its key at each difficulty, and for N = 32 both goals ground for real (random
swarms and targets, several trials). The analytic figures use the measured rate. Usage::

    .venv/bin/python bench/id_grinding.py            # a few minutes on one core
    .venv/bin/python bench/id_grinding.py --quick    # under a minute: nothing at d >= 14

Prints one JSON object. The rate is the ``cryptography`` package's key generation; a dedicated
grinder (point additions instead of a scalar multiplication per key, GPUs) is orders of
magnitude faster, so the seconds are an upper bound on an attacker's time, the key counts not.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from rangecast.runtime.identity import DEFAULT_ID_DIFFICULTY, meets_puzzle, node_id_of

RING = 1 << 160
LEAF_SET = 16
SIZES = (32, 1_000, 1_000_000, 10_000_000)


def _key_id() -> int:
    """One fresh key's node id, as an integer: the unit of an attacker's work."""
    pub = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return int.from_bytes(node_id_of(pub), "big")


def _dist(a: int, b: int) -> int:
    d = abs(a - b)
    return min(d, RING - d)


def _grind(hit: Callable[[int], bool], difficulty: int, cap: int) -> tuple[int, float, bool]:
    """Keys until one solves the puzzle and ``hit``s: (keys, seconds, found within ``cap``)."""
    t0 = time.perf_counter()
    for n in range(1, cap + 1):
        nid = _key_id()
        if hit(nid) and meets_puzzle(nid.to_bytes(20, "big"), difficulty):
            return n, time.perf_counter() - t0, True
    return cap, time.perf_counter() - t0, False


def _capped_mean(p: float, cap: int) -> float:
    """Mean keys of a search that succeeds with probability ``p`` per key, stopped at ``cap``."""
    return float(cap) if p <= 0.0 else (1.0 - (1.0 - p) ** cap) / p


def key_rate(seconds: float) -> float:
    """Keys (pair, id, puzzle check) per second on this core."""
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        meets_puzzle(_key_id().to_bytes(20, "big"), 1)
        n += 1
    return n / (time.perf_counter() - t0)


def honest_cost(difficulty: int, samples: int) -> dict[str, Any]:
    """What generating one admissible key costs an honest peer (``samples`` keys ground)."""
    runs = [_grind(lambda _: True, difficulty, 1 << 40) for _ in range(samples)]
    keys = [k for k, _, _ in runs]
    secs = [s for _, s, _ in runs]
    return {
        "difficulty": difficulty,
        "samples": samples,
        "expected_keys": 2**difficulty,
        "mean_keys": statistics.fmean(keys),
        "mean_s": round(statistics.fmean(secs), 4),
        "max_s": round(max(secs), 4),
        "keys_per_s": round(sum(keys) / sum(secs)),
    }


def analytic(n: int, difficulty: int, rate: float) -> dict[str, Any]:
    """Keys and one-core seconds (at ``rate``) for both goals in a swarm of ``n``."""
    scale = 2**difficulty
    take_median = n * scale
    take_p90 = 9 * n * scale
    leaf_mean = n * scale / (LEAF_SET - 1)
    leaf_median = n * scale * (2 ** (1 / LEAF_SET) - 1)

    def s(keys: float) -> float:
        return round(keys / rate, 3)

    return {
        "n": n,
        "difficulty": difficulty,
        "takeover_keys_median": round(take_median),
        "takeover_s_median": s(take_median),
        "takeover_keys_p90": round(take_p90),
        "takeover_s_p90": s(take_p90),
        "leafset_keys_mean": round(leaf_mean, 1),
        "leafset_s_mean": s(leaf_mean),
        "leafset_keys_median": round(leaf_median, 1),
        "leafset_s_median": s(leaf_median),
    }


def measured(n: int, difficulty: int, trials: int, cap: int, rng: random.Random) -> dict[str, Any]:
    """Both goals ground for real in ``trials`` random swarms of ``n`` peers."""
    take: list[tuple[int, float, bool]] = []
    leaf: list[tuple[int, float, bool]] = []
    # Per trial, the keys expected given the region this swarm left open and the cap (a key
    # succeeds with p = its share of the ring / 2^d; E[min(T, cap)] = (1 - (1 - p)^cap) / p):
    # the sums compare measured and expected without the gaps' luck.
    take_expected = 0.0
    leaf_expected = 0.0
    half = LEAF_SET // 2
    for _ in range(trials):
        ids = [rng.getrandbits(160) for _ in range(n)]
        target = rng.getrandbits(160)
        nearest = min(_dist(target, i) for i in ids)
        take.append(_grind(lambda x, t=target, m=nearest: _dist(t, x) < m, difficulty, cap))
        take_expected += _capped_mean(2 * nearest / RING / 2**difficulty, cap)
        # The victim's leaf set: the 8 nearest on each side; a new id enters it if it is
        # nearer (on its side) than the 8th.
        victim = rng.choice(ids)
        cw = sorted((i - victim) % RING for i in ids if i != victim)
        cw_edge = cw[half - 1] if len(cw) >= half else RING
        ccw = sorted((victim - i) % RING for i in ids if i != victim)
        ccw_edge = ccw[half - 1] if len(ccw) >= half else RING
        leaf_expected += _capped_mean((cw_edge + ccw_edge) / RING / 2**difficulty, cap)
        leaf.append(
            _grind(
                lambda x, v=victim, a=cw_edge, b=ccw_edge: (x - v) % RING < a or (v - x) % RING < b,
                difficulty,
                cap,
            )
        )

    def summary(runs: list[tuple[int, float, bool]], expected: float) -> dict[str, Any]:
        keys = sorted(k for k, _, _ in runs)
        return {
            "keys_sum": sum(keys),
            "keys_sum_expected_given_gaps": round(expected),
            "trials": len(runs),
            "found": sum(1 for _, _, ok in runs if ok),
            "keys_median": statistics.median(keys),
            "keys_mean": round(statistics.fmean(keys), 1),
            "keys_min": keys[0],
            "keys_max": keys[-1],
            "s_median": round(statistics.median(s for _, s, _ in runs), 3),
            "s_total": round(sum(s for _, s, _ in runs), 2),
        }

    return {
        "n": n,
        "difficulty": difficulty,
        "cap_keys": cap,
        "takeover": summary(take, take_expected),
        "leafset": summary(leaf, leaf_expected),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip the trials at the default")
    ap.add_argument("--seed", type=int, default=18)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rate = key_rate(3.0)
    honest = [
        honest_cost(d, samples)
        for d, samples in ((0, 2000), (8, 100), (12, 20), (14, 10), (16, 3))
        if not (args.quick and d > 12)
    ]
    difficulties = (0, 8, 12, DEFAULT_ID_DIFFICULTY, 16, 20)
    model = [analytic(n, d, rate) for d in difficulties for n in SIZES]
    # Trials at N = 32: many at low difficulty, a few at the default (about 18 s each, with a
    # heavy tail: a cap of 20 times the median keeps the run bounded; capped trials show).
    plan = [(0, 200), (4, 100), (8, 20)]
    if not args.quick:
        plan.append((DEFAULT_ID_DIFFICULTY, 5))
    trials = [measured(32, d, t, 20 * 32 * 2**d, rng) for d, t in plan]
    print(
        json.dumps(
            {
                "cpu_count": os.cpu_count(),
                "default_difficulty": DEFAULT_ID_DIFFICULTY,
                "keys_per_s_one_core": round(rate),
                "honest_key": honest,
                "analytic": model,
                "measured_n32": trials,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
