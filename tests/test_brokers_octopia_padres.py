"""OctopiA against PADRES with tree IDs on the paper's 70-broker layout (seed 002, Figs. 9b-c):
a 14-node tree (4 inner, 10 leaves) x 5 clusters, random advertisements and subscriptions at
random brokers, both on broker cores through the harness. The paper: SRT -93 %, 98.9x fewer
advertisement messages; flooding math (BASELINES 1) gives 341 messages per ad on the
unclustered SCOT against 4 (+ up to 4 CIB_SETs) with OctopiA, 43-85x."""

from __future__ import annotations

import random

from broker_harness import BrokerNet, oracle

from rangecast.brokers import octopia
from rangecast.brokers.broker import PADRES_TID, Broker
from rangecast.brokers.filters import Box
from rangecast.brokers.messages import Advertise, Control, Subscribe
from rangecast.pubsub.schema import Attribute, Schema
from rangecast.pubsub.subscription import Range

SCHEMA = Schema("stock", (Attribute("price", "float", 0, 100), Attribute("vol", "float", 0, 100)))
#: G_a: root 0 with 1-3; 1 with 4-7, 2 with 8-10, 3 with 11-13: 4 inner nodes, 10 leaves.
SHAPE = [(0, 1), (0, 2), (0, 3), (1, 4), (1, 5), (1, 6), (1, 7), (2, 8), (2, 9), (2, 10),
         (3, 11), (3, 12), (3, 13)]  # fmt: skip
M, N = 5, 14
N_ADS, N_SUBS = 100, 300


def _box(rng: random.Random, width: float) -> Box:
    ranges = {}
    for i in range(2):
        lo = rng.uniform(0, 100 - width)
        ranges[i] = Range(lo, lo + width)
    return Box.from_ranges(SCHEMA, ranges)


def _octo(b: Broker) -> octopia.OctopiaStrategy:
    assert isinstance(b.strategy, octopia.OctopiaStrategy)
    return b.strategy


def test_octopia_against_padres_tid_on_70_brokers() -> None:
    rng = random.Random(17)
    groups = [[c * N + x for x in range(N)] for c in range(M)]
    n = M * N
    rtt = [[0.0] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            # Clusters are latency groups: close inside, far between.
            base = 5.0 if a // N == b // N else 40.0
            rtt[a][b] = rtt[b][a] = base + rng.uniform(0, 20)
    layout = octopia.build(SHAPE, M, groups, rtt)
    octo = BrokerNet(layout.graph, layout.overlays, SCHEMA, layout.configs(), layout.strategy)
    g = layout.graph
    padres = BrokerNet(g, [g.overlay("all")], SCHEMA, PADRES_TID)
    # Subscriptions first (2 % selectivity: 14 x 14 of 100 x 100), then the ads, as in Fig. 9.
    subs = [(rng.randrange(n), _box(rng, 14.0)) for _ in range(N_SUBS)]
    ads = [(rng.randrange(n), _box(rng, 30.0)) for _ in range(N_ADS)]
    live_o, live_p = {}, {}
    for v, box in subs:
        live_o[octo.act(v, lambda b, now, box=box: _octo(b).subscribe(b, box, now))] = (v, box)
        live_p[padres.subscribe(v, box)] = (v, box)
    octo.log.clear()
    padres.log.clear()
    ad_o = [octo.act(v, lambda b, now, box=box: _octo(b).advertise(b, box, now)) for v, box in ads]
    ad_p = [padres.advertise(v, box) for v, box in ads]

    adv_o = sum(isinstance(s.msg, Advertise) for s in octo.log)
    cib = sum(isinstance(s.msg, Control) for s in octo.log)
    adv_p = sum(isinstance(s.msg, Advertise) for s in padres.log)
    srt_o = sum(b.srt_size() for b in octo.brokers.values())
    srt_p = sum(b.srt_size() for b in padres.brokers.values())
    # Flooding math: 2|E| - (n - 1) = 2 x 205 - 69 = 341 per ad on the SCOT; m - 1 = 4 with
    # OctopiA, plus at most one CIB_SET per secondary target cluster.
    assert len(g.edges) == 205
    assert adv_p == 341 * N_ADS and adv_o == 4 * N_ADS
    assert 0 < cib <= 4 * N_ADS
    assert srt_p == n * N_ADS and srt_o == M * N_ADS  # SRT: -92.9 %, the paper's -93 %
    ratio_adv = adv_p / adv_o
    ratio_ctl = adv_p / (adv_o + cib)
    print(
        f"\nads {N_ADS}, subs {N_SUBS}: ad messages PADRES-TID {adv_p}, OctopiA {adv_o} "
        f"(+{cib} CIB_SET): {ratio_adv:.1f}x ({ratio_ctl:.1f}x with CIB_SETs); "
        f"SRT {srt_p} vs {srt_o} ({100 * (srt_o / srt_p - 1):.1f} %); PRT "
        f"{sum(b.prt_size() for b in padres.brokers.values())} vs "
        f"{sum(b.prt_size() for b in octo.brokers.values())}"
    )
    assert 341 / 8 <= ratio_ctl <= ratio_adv == 341 / 4

    # The same publications reach the same subscribers, each once, on both.
    for i in rng.sample(range(N_ADS), 10):
        v, box = ads[i]
        e = tuple(rng.uniform(lo, hi) for lo, hi, _, _ in box.dims)
        eo = octo.act(v, lambda b, now, i=i, e=e: _octo(b).publish(b, ad_o[i], e, now))
        ep = padres.publish(v, e, ad=ad_p[i])
        assert octo.deliveries_of(eo) == padres.deliveries_of(ep) == oracle(live_o, e)
    assert sum(isinstance(s.msg, Subscribe) for s in octo.log) == 0
