"""``rangecast reproduce``: run an evaluation's experiments, then one page beside the papers.

1. The evaluation's plans (analysis.reproduce.plans) run as one sweep (analysis.sweep: Spark
   tasks with ``spark``, else local processes) into ``OUT/runs/``, with ``OUT/sweep.json`` and
   ``OUT/sweep.parquet``.
2. The report (analysis.report.build_report) reads every run log with Spark, recomputes each
   run's figures, checks them against the run's summary, and draws the per-run figures into
   ``OUT/figures/`` (with its own page, ``OUT/figures/runs.html``).
3. Each figure over the seeds (analysis.reproduce.evaluate), checked against the papers
   (analysis.reproduce.compare), drawn with confidence intervals and written as ``OUT/report.html``
   and ``OUT/reproduction.json``.

Progress goes to stderr with an ETA over the whole reproduction: each run's cost is estimated
from its size (``estimate_s``), the estimates are rescaled by the pace observed so far.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rangecast.analysis.reproduce import notes, page
from rangecast.analysis.reproduce.compare import TOLERANCE, figure_verdict
from rangecast.analysis.reproduce.evaluate import (
    LBDD_FIGURES,
    THESIS_FIGURES,
    FigureResult,
    records,
    thesis_figures,
)
from rangecast.analysis.reproduce.lbdd import lbdd_figures
from rangecast.analysis.reproduce.plans import FULL, QUICK, Size, reproduction_plan
from rangecast.analysis.sweep.command import DEFAULT_MASTER, prepare_out, run_sweep
from rangecast.analysis.sweep.plan import RunSpec
from rangecast.analysis.sweep.runs import Progress, dispatch_order, run_dir

FORMAT = "rangecast-reproduction"
#: Seconds a 1,000-node, 10,000-event thesis run takes here (measured, two runs sharing 2 cores):
#: the unit of the run-time estimates, which only the ETA uses.
THESIS_1000_S = 220.0


def estimate_s(spec: RunSpec) -> float:
    """A run's rough wall time: thesis ~ nodes^1.5 x events (docs/sweeps.md's scalability
    times), LBDD ~ bytes x subscribers (docs/lbdd.md's transfer times)."""
    p = spec.params
    if spec.scenario == "thesis":
        return 3.0 + THESIS_1000_S * (p.nodes / 1000) ** 1.5 * p.events / 10_000
    copies = p.data_bytes * p.subscribers * (2 if p.p2p else 1)
    return 3.0 + 0.02 * p.subscribers + 0.9e-9 * copies


def report_estimate_s(specs: Sequence[RunSpec]) -> float:
    """The report's Spark job: start-up, then about proportional to the logs' rows."""
    rows = 0.0
    for s in specs:
        p = s.params
        if s.scenario == "thesis":
            rows += p.nodes * p.events * 0.5
        else:
            rows += 2 * p.subscribers * max(1, p.data_bytes // p.slice_bytes)
    return 40.0 + 1.2e-6 * rows


def _clock(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class EtaProgress(Progress):
    """The sweep's progress lines, each with the time left for the whole reproduction."""

    def __init__(self, specs: Sequence[RunSpec], quiet: bool, slots: int) -> None:
        super().__init__(len(specs), quiet)
        #: Runs at a time: before anything finishes, the estimates are shared among them.
        self.slots = max(1, slots)
        self.specs = list(specs)
        self.est = {s.index: estimate_s(s) for s in specs}
        self.order = [s.index for s in dispatch_order(specs)]
        self.report_s = report_estimate_s(specs)
        self.finished_ids: set[int] = set()
        self.spark_done = 0
        self.phase = "runs"
        self.runs_wall = 0.0

    def _done_est(self) -> float:
        if self.finished_ids:
            return sum(self.est[i] for i in self.finished_ids)
        # Spark says how many tasks finished, not which: longest first, as dispatched.
        return sum(self.est[i] for i in self.order[: self.spark_done])

    def eta_s(self) -> float:
        elapsed = time.monotonic() - self.t0
        runs_total = sum(self.est.values())
        if self.phase == "runs":
            done = self._done_est()
            # The pace so far (our estimates vs the clock), once something has finished.
            if done <= 0:  # nothing finished yet: the estimates, shared among the slots
                return max(0.0, (runs_total + self.report_s) / self.slots - elapsed)
            pace = elapsed / done
            return (runs_total - done) * pace + self.report_s * pace
        pace = self.runs_wall / runs_total if runs_total else 1.0
        return max(0.0, self.report_s * pace - (elapsed - self.runs_wall))

    def say(self, message: str) -> None:
        if not self.quiet:
            line = f"[reproduce {self.elapsed()}, ETA {_clock(self.eta_s())}] {message}"
            print(line, file=sys.stderr, flush=True)

    def status(self, active: int, completed: int, total: int) -> None:
        self.spark_done = completed
        super().status(active, completed, total)

    def finished(self, spec: RunSpec, outcome: dict[str, Any]) -> None:
        self.finished_ids.add(spec.index)
        super().finished(spec, outcome)

    def start_report(self) -> None:
        self.phase = "report"
        self.runs_wall = time.monotonic() - self.t0


@dataclass
class Reproduction:
    out: Path
    document: dict[str, Any]
    figures: list[FigureResult]
    #: Runs that failed or whose deliveries disagree with the oracle, and report mismatches.
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _slots(master: str) -> int:
    """Tasks a Spark master runs at once, as far as its URL says (a cluster's: assume 2)."""
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
    if m is None:
        return 2
    if m.group(1) == "*":
        return os.cpu_count() or 1
    return int(m.group(1) or 1)


def _part(run_dir_name: str) -> str:
    """``r012_thesis-probe_probe-multicast_seed-1`` -> ``thesis-probe``."""
    return Path(run_dir_name).name.split("_")[1]


def reproduce(
    evaluation: str,
    out: Path,
    *,
    quick: bool = False,
    size: Size | None = None,
    spark: bool = False,
    master: str = DEFAULT_MASTER,
    force: bool = False,
    quiet: bool = False,
    jobs: int = 2,
) -> Reproduction:
    """Run ``evaluation`` (thesis, lbdd or all) into ``out``; ``size`` overrides ``quick``."""
    size = size or (QUICK if quick else FULL)
    plan, members = reproduction_plan(evaluation, size)
    prepare_out(out, force)  # (refuses a file, a non-empty directory, an unwritable place)
    progress = EtaProgress(plan.runs, quiet, _slots(master) if spark else jobs)
    progress.say(
        f"reproducing {evaluation} ({size.name}): {len(plan.runs)} runs "
        f"({', '.join(f'{k} {len(v)}' for k, v in members.items())}), then the report"
    )
    wall0 = time.perf_counter()
    session = None
    try:
        if spark:
            from rangecast.analysis.sweep.spark import active_session, spark_session

            own = active_session() is None
            session = spark_session(master)
        swept = run_sweep(
            plan,
            out,
            spark=spark,
            master=master,
            jobs=jobs,
            report=False,
            quiet=quiet,
            force=True,
            progress=progress,
        )
        progress.start_report()
        ok_dirs = [run_dir(out, plan.runs[r["index"]]) for r in swept.rows if r["status"] == "ok"]
        from rangecast.analysis.report.build import build_report

        progress.say(f"report over {len(ok_dirs)} run logs")
        built = build_report(
            ok_dirs,
            master=master,
            html=out / "figures" / "runs.html",
            out_dir=out / "figures",
            spark=session,
            progress=progress.say,
        )
    finally:
        if session is not None and own:
            session.stop()
    recs = records(built["runs"], _part)
    figures = thesis_figures(recs, size.nodes)
    if any(r.part.startswith("lbdd-") for r in recs):
        figures += lbdd_figures(recs)
    drawn = _draw(out, figures, built)
    problems = [f"run {f['run']} failed: {f['error']}" for f in swept.document["failures"]]
    if swept.mismatched:
        problems.append(f"{swept.mismatched} runs disagree with the oracle")
    if built["mismatches"]:
        problems.append(f"{built['mismatches']} recomputed figures disagree with the summaries")
    expected = _expected(evaluation)
    missing = [f for f in expected if f not in {g.figure for g in figures}]
    problems += [f"figure {f} was not produced" for f in missing]
    wall = time.perf_counter() - wall0
    agree = (
        f"all agree ({len(built['runs'])} runs)"
        if not built["mismatches"]
        else f"{built['mismatches']} MISMATCHES"
    )
    facts = {
        "evaluation": evaluation,
        "evaluation_text": {
            "thesis": "thesis' evaluation (Chapter 4, Figs 4.1-4.10)",
            "lbdd": "LBDD paper's evaluation",
            "all": "thesis' (Chapter 4) and LBDD paper's evaluations",
        }[evaluation],
        "command": f"rangecast reproduce {evaluation}"
        + (" --spark" if spark else "")
        + (" --quick" if size is QUICK else "")
        + f" --out {out}",
        "runs": len(plan.runs),
        "size_text": _size_text(size),
        "executor": f"Spark ({master})" if spark else f"{jobs} local processes; report on Spark",
        "wall_text": f"{wall:.0f} s",
        "recomputed_text": agree,
        "runs_page": "figures/runs.html",
    }
    page.write_page(
        out / "report.html",
        figures,
        drawn,
        notes.explanations(recs, figures),
        notes.context(recs, figures),
        facts,
    )
    document = {
        "format": FORMAT,
        "version": 1,
        "evaluation": evaluation,
        "size": {k: getattr(size, k) for k in size.__dataclass_fields__},
        "parts": {k: [plan.runs[i].run_id for i in v] for k, v in members.items()},
        "tolerance": TOLERANCE,
        "wall_s": wall,
        "runs": len(plan.runs),
        "failed": len(swept.document["failures"]),
        "recomputed_mismatches": built["mismatches"],
        "recomputed_runs": len(built["runs"]),
        "problems": problems,
        "figures": [
            {
                "figure": f.figure,
                "title": f.title,
                "verdict": figure_verdict(f.checks),
                "within_tolerance_or_better": figure_verdict(f.checks) in ("within", "better"),
                "images": [str(p.relative_to(out)) for p, _ in drawn.get(f.figure, [])],
                "checks": [c.as_dict() for c in f.checks],
            }
            for f in figures
        ],
        "html": "report.html",
    }
    (out / "reproduction.json").write_text(
        json.dumps(document, indent=1, sort_keys=True, default=_json_default) + "\n"
    )
    progress.say(f"wrote {out / 'report.html'} and {out / 'reproduction.json'} ({wall:.0f} s)")
    return Reproduction(out, document, figures, problems)


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


def _expected(evaluation: str) -> tuple[str, ...]:
    return {
        "thesis": THESIS_FIGURES,
        "lbdd": LBDD_FIGURES,
        "all": THESIS_FIGURES + LBDD_FIGURES,
    }[evaluation]


def _size_text(size: Size) -> str:
    sizes = ", ".join(f"{n:,}" for n in size.scale_nodes)
    return (
        f"{size.name}: thesis {size.nodes:,} nodes x {size.events:,} events, seeds "
        f"{', '.join(map(str, size.seeds))}; scalability {sizes}"
        f" nodes ({', '.join(size.latencies)}), seeds {', '.join(map(str, size.scale_seeds))}; "
        f"LBDD n = {', '.join(map(str, size.tree_subscribers))}, rate n = "
        f"{', '.join(map(str, size.rate_subscribers))} ({_bytes(size.rate_bytes)}), "
        f"{_bytes(size.transfer_bytes)} to 11"
    )


def _bytes(n: int) -> str:
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


def _draw(
    out: Path, figures: Sequence[FigureResult], built: dict[str, Any]
) -> dict[str, list[tuple[Path, str]]]:
    """Our CI figure and the report's drawing of the figure (the first seed's runs)."""
    import rangecast.analysis.report.paper as paper

    figs = out / "figures"
    drawn: dict[str, list[tuple[Path, str]]] = {}
    report_figs = built["figures"]
    runs = {r["dir"]: r for r in built["runs"]}

    def first_seed(dirs: Sequence[str]) -> int:
        return min(int(runs[d]["params"]["seed"]) for d in dirs if d in runs)

    for f in figures:
        mine: list[tuple[Path, str]] = []
        slug = f.figure.replace(".", "_")
        if f.figure in ("4.9", "4.10"):
            lo, hi = paper.SCALE_MAX_LATENCY_MS
            pts: list[Any] = (
                [
                    ("thesis (King): mean", sorted(paper.SCALE_AVG_LATENCY_MS.items()), "line"),
                    ("thesis (King): maximum 1.6-1.8 s", ((1000, 5000), (lo, hi)), "band"),
                ]
                if f.figure == "4.9"
                else [("thesis: mean at 1,000 nodes", [(1000, paper.PUBLISH_MEAN_B)], "line")]
            )
            ylabel = "delivery latency (ms)" if f.figure == "4.9" else "bytes per event per node"
            p = page.scaling_figure(figs / f"ci-fig{slug}.png", f, ylabel, pts)
            mine.append((p, f"Fig {f.figure} over the seeds: mean and 95% CI per point."))
        elif f.figure == "LBDD-tree":
            p = page.lbdd_tree_figure(figs / "ci-lbdd-tree.png", f, paper.LBDD_DEPTH)
            mine.append((p, "Tree depth and publisher contribution against n, 95% CI."))
        elif f.figure == "LBDD-rate":
            p = page.lbdd_rate_figure(figs / "ci-lbdd-rate.png", f)
            mine.append((p, "Rate per subscriber against n, LBDD and point-to-point, 95% CI."))
        elif f.figure == "LBDD-8GB":
            q = page.lbdd_transfer_figure(figs / "ci-lbdd-8gb.png", f)
            if q is not None:
                mine.append((q, "Transfer times, paper vs ours (mean of the seeds, 95% CI)."))
        if f.figure[0].isdigit() and f.figure not in ("4.9", "4.10"):
            q = page.ratio_figure(figs / f"ci-fig{slug}.png", f)
            if q is not None:
                mine.append((q, "Ours / paper for every stated value, 95% CI over the seeds."))
        # The report's own drawing: for a per-run figure, the first seed's run (or pair).
        candidates = [g for g in report_figs if g["figure"] == f.figure]
        if candidates:
            best = min(candidates, key=lambda g: (first_seed(g["dirs"]), len(g["title"])))
            mine.append(
                (
                    Path(best["path"]),
                    f"The report's {best['title']} (seed "
                    f"{first_seed(best['dirs'])}): {best['caption'][:400]}",
                )
            )
        drawn[f.figure] = mine
    return drawn
