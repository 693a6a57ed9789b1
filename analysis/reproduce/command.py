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

Progress goes to stderr with an ETA over the whole reproduction (``Eta``): each step weighted by
its expected cost (a run's from its size, ``estimate_s``; the report's from the logs' rows; the
page's from its figures), the runs scheduled on the slots as the sweep dispatches them, and the
estimates rescaled by the pace observed, damped so that one run cannot swing it. During the
report, its Spark jobs are counted as they finish (analysis.sweep.spark.watch_report).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import rangecast.analysis.report.paper as paper
from rangecast.analysis.reproduce import notes, page
from rangecast.analysis.reproduce.causes import attach_causes
from rangecast.analysis.reproduce.compare import TOLERANCE, VERDICTS, figure_verdict
from rangecast.analysis.reproduce.evaluate import (
    LBDD_FIGURES,
    THESIS_FIGURES,
    FigureResult,
    records,
    thesis_figures,
)
from rangecast.analysis.reproduce.lbdd import lbdd_figures
from rangecast.analysis.reproduce.plans import (
    CAUSE_PARTS,
    FULL,
    QUICK,
    Size,
    only_parts,
    reproduction_plan,
)
from rangecast.analysis.sweep.command import (
    DEFAULT_MASTER,
    finished_runs,
    prepare_out,
    run_sweep,
)
from rangecast.analysis.sweep.plan import Plan, RunSpec
from rangecast.analysis.sweep.runs import Progress, dispatch_order, run_dir
from rangecast.dht.errors import LocalProtocolError

FORMAT = "rangecast-reproduction"
#: Measured wall times (s) of one thesis run on this 2-core machine, 10,000 events and 5
#: subscriptions per node, by network size: the calibration of the run-time estimates (the ETA
#: and --dry-run). The medians of the full reproduction's scalability runs (five seeds, both
#: latency models), which ran two at a time as a reproduction does, each on a core of its own.
#: Between and beyond the points, a power law through the nearest two.
THESIS_SOLO_S = {1000: 95.0, 1740: 112.0, 3000: 195.0, 4000: 285.0, 5000: 390.0}


def thesis_solo_s(nodes: int, events: int) -> float:
    """A thesis run's solo wall time: THESIS_SOLO_S interpolated in log-log over the nodes,
    proportional to the events."""
    pts = sorted(THESIS_SOLO_S.items())
    if nodes in THESIS_SOLO_S:
        t = THESIS_SOLO_S[nodes]
    else:
        lo = max([p for p in pts if p[0] < nodes], default=pts[0], key=lambda p: p[0])
        hi = min([p for p in pts if p[0] > nodes], default=pts[-1], key=lambda p: p[0])
        if lo == hi:  # beyond the points: the nearest two
            lo, hi = (pts[0], pts[1]) if nodes < pts[0][0] else (pts[-2], pts[-1])
        k = math.log(hi[1] / lo[1]) / math.log(hi[0] / lo[0])
        t = lo[1] * (nodes / lo[0]) ** k
    return t * events / 10_000


def estimate_s(spec: RunSpec) -> float:
    """A run's rough solo wall time: thesis from THESIS_SOLO_S (nodes, events), LBDD ~ bytes x
    subscribers (measured: an 8 GiB transfer to 11 subscribers, LBDD and point-to-point, takes
    47-64 s)."""
    p = spec.params
    if spec.scenario == "thesis":
        return 3.0 + thesis_solo_s(p.nodes, p.events)
    copies = p.data_bytes * p.subscribers * (2 if p.p2p else 1)
    return 3.0 + 0.02 * p.subscribers + 0.33e-9 * copies


def estimate_wall_s(
    specs: Sequence[RunSpec], slots: int = 2, reported: Sequence[RunSpec] | None = None
) -> float:
    """The runs' wall time ``slots`` at a time, longest first as the sweep dispatches them (each
    run its solo time: two runs on the 2 cores), then the report over ``reported`` (default the
    same runs; with --resume, every run of the plan, finished earlier or not)."""
    free = [0.0] * max(1, slots)
    for spec in dispatch_order(specs):
        i = free.index(min(free))
        free[i] += estimate_s(spec)
    report = report_estimate_s(specs if reported is None else reported)
    return max(free) + report + page_estimate_s(len(THESIS_FIGURES) + len(LBDD_FIGURES))


def report_estimate_s(specs: Sequence[RunSpec]) -> float:
    """The report: Spark's start-up, ~0.6 s a run (its few Spark jobs, ~4 a run, and its
    figures drawn), then about proportional to the logs' rows. Measured: 70 s over the quick
    plan's 52 logs, 19-23 min over the full size's 255 (docs/reproduce.md)."""
    rows = 0.0
    for s in specs:
        p = s.params
        if s.scenario == "thesis":
            rows += p.nodes * p.events * 0.5
        else:
            rows += 2 * p.subscribers * max(1, p.data_bytes // p.slice_bytes)
    return 40.0 + 0.6 * len(specs) + 1.1e-6 * rows


#: Dry-run columns shown on their own, so not repeated among the changed parameters.
_SHOWN = ("seed", "nodes", "subscribers", "latency")


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def changed_params(spec: RunSpec) -> dict[str, Any]:
    """The run's parameters that differ from its scenario's defaults (but the shown columns)."""
    ours = _flat(dataclasses.asdict(spec.params))
    default = _flat(dataclasses.asdict(type(spec.params)()))
    return {k: v for k, v in ours.items() if default.get(k) != v and k not in _SHOWN}


def seeds_per_point(plan_runs: Sequence[RunSpec]) -> dict[str, int]:
    """Seeds per point (a part's runs with equal settings but the seed), the fewest per part."""
    points: dict[tuple[str, str], set[int]] = {}
    for spec in plan_runs:
        part = _part(spec.run_id)
        key = json.dumps(spec.settings, sort_keys=True, default=str)
        points.setdefault((part, key), set()).add(spec.seed)
    out: dict[str, int] = {}
    for (part, _), seeds in points.items():
        out[part] = min(out.get(part, len(seeds)), len(seeds))
    return out


def chosen_plan(
    evaluation: str, size: Size, parts: Sequence[str] = ()
) -> tuple[Plan, dict[str, list[int]]]:
    """The reproduction's plan and its parts' run indices, cut to ``parts`` when given."""
    plan, members = reproduction_plan(evaluation, size)
    if parts:
        try:
            plan, members = only_parts(plan, members, parts)
        except ValueError as exc:
            raise LocalProtocolError(str(exc)) from None
    return plan, members


def dry_run(
    evaluation: str, size: Size, slots: int = 2, parts: Sequence[str] = (), out: Path | None = None
) -> str:
    """The plan (every run: part, scenario, nodes or subscribers, seed, latency model, the
    parameters that differ from the scenario's defaults, its estimated solo time) and the
    estimated wall time on this machine; nothing runs and nothing is written. With ``out``
    (``--resume``), runs already finished there are marked and left out of the estimate."""
    plan, members = chosen_plan(evaluation, size, parts)
    reused = finished_runs(plan, out) if out is not None and out.is_dir() else {}
    head = f"{'run':<46} {'part':<24} {'scenario':<8} {'nodes/subs':>10} {'seed':>4} "
    lines = [
        f"rangecast reproduce {evaluation} ({size.name}): {len(plan.runs)} runs, "
        f"{size.note or size.name}",
        head + f"{'latency':<10} {'est. solo':>9}  changed from the scenario's defaults",
    ]
    for spec in plan.runs:
        p = spec.params
        n = p.nodes if spec.scenario == "thesis" else p.subscribers
        latency = getattr(p, "latency", "") or "-"
        changed = ", ".join(f"{k}={v}" for k, v in changed_params(spec).items()) or "-"
        lines.append(
            f"{spec.run_id:<46} {_part(spec.run_id):<24} {spec.scenario:<8} {n:>10,} "
            f"{spec.seed:>4} {latency:<10} "
            f"{'finished' if spec.index in reused else _clock(estimate_s(spec)):>9}  {changed}"
        )
    per = seeds_per_point(plan.runs)
    lines.append("")
    for part, idx in members.items():
        cause = CAUSE_PARTS.get(part)
        solo = sum(estimate_s(plan.runs[i]) for i in idx)
        lines.append(
            f"{part}: {len(idx)} runs, {per.get(part, 0)} seeds per point, solo "
            f"{_clock(solo)}" + (f" (cause part for Fig {', '.join(cause.figures)}: "
                                 f"{cause.what})" if cause else "")
        )  # fmt: skip
    todo = [spec for spec in plan.runs if spec.index not in reused]
    wall = estimate_wall_s(todo, slots, reported=plan.runs)
    measured = ", ".join(f"{n:,} nodes {t:.0f} s" for n, t in THESIS_SOLO_S.items())
    if reused:
        lines.append(f"finished already in {out}: {len(reused)} of {len(plan.runs)} runs")
    lines.append(
        f"estimated wall time: {_clock(wall)} ({slots} runs at a time, from the measured wall "
        f"times of one thesis run, two at a time on this machine: {measured}; then the report, "
        f"{_clock(report_estimate_s(plan.runs))}, and the page)"
    )
    return "\n".join(lines)


def _clock(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


#: The page after the report (``reproduce``'s last step: each figure over the seeds, its
#: images drawn with matplotlib, the page and reproduction.json): 4 s for the quick plan's 15
#: figures (the report's own drawings of every run are the report's time).
PAGE_BASE_S = 3.0
PAGE_PER_FIGURE_S = 0.5


def page_estimate_s(figures: int) -> float:
    """The page's expected wall time for ``figures`` figures."""
    return PAGE_BASE_S + PAGE_PER_FIGURE_S * figures


def _left_s(expected: float, spent: float) -> float:
    """Time left of a step expected to take ``expected`` s, ``spent`` s in: what the estimate
    leaves until the last 2 % of it; past that, a quarter of the time spent beyond 90 % of the
    estimate, so that a step running over its estimate shows a time left that grows slowly
    with it instead of sitting at 0:00:00."""
    return max(expected - spent, 0.25 * (spent - 0.9 * expected))


class Eta:
    """The time left for a whole reproduction, weighted by each step's expected cost.

    Steps: the runs (each its ``estimate_s``, ``slots`` at a time, longest first as the sweep
    dispatches them), then the report (``report_estimate_s``), then the page
    (``page_estimate_s``). Time left = the remaining runs scheduled on the slots (a running
    run counts what its estimate leaves of it, ``_left_s``), plus the report and the page.
    The estimates are rescaled by the pace observed: the finished runs' wall time over their
    estimates, blended with a prior pace of 1 worth ``PRIOR_S`` seconds of runs, so that a
    first short run that took twice its estimate does not double the time left of hours of
    runs (what made the old ETA jump from 0:00:36 to 6:22 and back to 2:50).

    ``clock`` (seconds, monotonic) is injected: tests drive it by hand, never by sleeping.
    """

    #: Weight of the prior pace (1: the estimates are right), in seconds of estimated runs.
    PRIOR_S = 600.0
    #: Bounds of the pace: an estimate is never believed more than 4x off.
    PACE = (0.25, 4.0)

    def __init__(
        self,
        est: dict[int, float],
        order: Sequence[int],
        slots: int,
        report_s: float,
        page_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.est = dict(est)
        self.order = list(order)
        self.slots = max(1, slots)
        self.report_s = report_s
        self.page_s = page_s
        self.clock = clock
        self.t0 = clock()
        self.started_at: dict[int, float] = {}
        #: Finished runs: index -> wall seconds.
        self.took: dict[int, float] = {}
        self.phase = "runs"
        self.phase_t0 = self.t0

    # ---- what happened

    def started(self, index: int) -> None:
        self.started_at.setdefault(index, self.clock())

    def finished(self, index: int, wall_s: float | None = None) -> None:
        now = self.clock()
        spent = now - self.started_at.get(index, self.t0)
        self.took[index] = wall_s if wall_s is not None and wall_s >= 0 else spent

    def spark_status(self, active: int, completed: int) -> None:
        """Spark says how many tasks run and finished, not which: longest first, as
        dispatched. A run is taken to start when it is first counted as running."""
        for i in self.order[:completed]:
            if i not in self.took:
                self.started(i)
                self.finished(i)
        for i in self.order[completed : completed + active]:
            self.started(i)

    def start(self, phase: str) -> None:
        """``report`` or ``page``: the runs are over."""
        self.phase = phase
        self.phase_t0 = self.clock()

    # ---- the estimate

    def pace(self) -> float:
        spent = sum(self.took.values())
        expected = sum(self.est.get(i, 0.0) for i in self.took)
        pace = (spent + self.PRIOR_S) / (expected + self.PRIOR_S)
        return min(max(pace, self.PACE[0]), self.PACE[1])

    def runs_left_s(self, now: float, pace: float) -> float:
        """The remaining runs' makespan on the slots from ``now``."""
        running = [
            _left_s(self.est.get(i, 0.0) * pace, now - t)
            for i, t in self.started_at.items()
            if i not in self.took
        ]
        free = sorted(running) + [0.0] * max(0, self.slots - len(running))
        for i in self.order:
            if i not in self.started_at and i not in self.took:
                k = free.index(min(free))
                free[k] += self.est[i] * pace
        return max(free, default=0.0)

    def left_s(self) -> float:
        now = self.clock()
        pace = self.pace()
        if self.phase == "runs":
            return self.runs_left_s(now, pace) + self.report_s * pace + self.page_s
        spent = now - self.phase_t0
        if self.phase == "report":
            return _left_s(self.report_s * pace, spent) + self.page_s
        return _left_s(self.page_s, spent)


class EtaProgress(Progress):
    """The sweep's progress lines, each with the time left for the whole reproduction
    (``Eta``)."""

    def __init__(
        self,
        specs: Sequence[RunSpec],
        quiet: bool,
        slots: int,
        reported: Sequence[RunSpec] | None = None,
        figures: int = len(THESIS_FIGURES) + len(LBDD_FIGURES),
        clock: Callable[[], float] = time.monotonic,
        stream: TextIO | None = None,
    ) -> None:
        """``specs``: the runs to make; ``reported``: the runs the report reads (default the
        same; with --resume also those finished earlier); ``figures``: how many the page
        draws."""
        super().__init__(len(specs), quiet)
        self.stream = stream
        self.eta = Eta(
            {s.index: estimate_s(s) for s in specs},
            [s.index for s in dispatch_order(specs)],
            slots,
            report_estimate_s(specs if reported is None else reported),
            page_estimate_s(figures),
            clock,
        )
        self.t0 = self.eta.t0

    def elapsed(self) -> str:
        return _clock(self.eta.clock() - self.t0)

    def eta_s(self) -> float:
        return self.eta.left_s()

    def say(self, message: str) -> None:
        if not self.quiet:
            line = f"[reproduce {self.elapsed()}, ETA {_clock(self.eta_s())}] {message}"
            print(line, file=self.stream or sys.stderr, flush=True)

    def started(self, spec: RunSpec) -> None:
        self.eta.started(spec.index)
        super().started(spec)

    def status(self, active: int, completed: int, total: int) -> None:
        self.eta.spark_status(active, completed)
        super().status(active, completed, total)

    def finished(self, spec: RunSpec, outcome: dict[str, Any]) -> None:
        wall = outcome.get("wall_s")
        self.eta.finished(spec.index, wall if isinstance(wall, int | float) else None)
        super().finished(spec, outcome)

    def start_report(self) -> None:
        self.eta.start("report")

    def start_page(self) -> None:
        self.eta.start("page")


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
    parts: Sequence[str] = (),
    resume: bool = False,
) -> Reproduction:
    """Run ``evaluation`` (thesis, lbdd or all) into ``out``; ``size`` overrides ``quick``.
    ``parts``: only these parts' runs (and the figures they allow); ``resume``: keep the runs
    an earlier reproduction into ``out`` finished with the same simulation code and parameters
    (``sweep.runs.reusable``)."""
    size = size or (QUICK if quick else FULL)
    plan, members = chosen_plan(evaluation, size, parts)
    # (refuses a file, a non-empty directory unless --force or --resume, an unwritable place)
    prepare_out(out, force, resume)
    reused = finished_runs(plan, out, adopt=True) if resume else {}
    todo = [spec for spec in plan.runs if spec.index not in reused]
    progress = EtaProgress(
        todo,
        quiet,
        _slots(master) if spark else jobs,
        reported=plan.runs,
        figures=len(_expected(evaluation)),
    )
    progress.say(
        f"reproducing {evaluation} ({size.name}): {len(plan.runs)} runs "
        f"({', '.join(f'{k} {len(v)}' for k, v in members.items())}), then the report"
        + (f"; {len(reused)} finished already in {out} (--resume)" if resume else "")
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
            resume=resume,
            reused=reused,
            progress=progress,
        )
        progress.start_report()
        ok_dirs = [run_dir(out, plan.runs[r["index"]]) for r in swept.rows if r["status"] == "ok"]
        from rangecast.analysis.report.build import build_report
        from rangecast.analysis.sweep.spark import watch_report

        progress.say(f"report over {len(ok_dirs)} run logs")
        with watch_report(progress.say, session):
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
    progress.start_page()
    progress.say("the figures over the seeds, against the papers, and the page")
    recs = records(built["runs"], _part)
    figures = thesis_figures(recs, size.nodes)
    if any(r.part.startswith("lbdd-") for r in recs):
        figures += lbdd_figures(recs)
    attach_causes(figures, recs)  # (and drops a cause naming a part that did not run)
    notes.captions(recs, figures, size.note)  # sets each figure's full caption
    drawn = _draw(out, figures, built)
    problems = [f"run {f['run']} failed: {f['error']}" for f in swept.document["failures"]]
    if swept.mismatched:
        problems.append(f"{swept.mismatched} runs disagree with the oracle")
    if built["mismatches"]:
        problems.append(f"{built['mismatches']} recomputed figures disagree with the summaries")
    # A reproduction of some parts only (--parts) draws the figures they allow; the others are
    # not missing, just not asked for.
    expected = () if parts else _expected(evaluation)
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
        + (f" --parts {','.join(parts)}" if parts else "")
        + f" --out {out}",
        "runs": len(plan.runs),
        "size_text": _size_text(size),
        "executor": f"Spark ({master})" if spark else f"{jobs} local processes; report on Spark",
        "wall_text": f"{wall:.0f} s",
        "recomputed_text": agree,
        "runs_page": "figures/runs.html",
        "size": size.name,
        "size_note": size.note,
        "our_parameters": paper.our_parameters(),
    }
    why = notes.explanations(recs, figures)
    page.write_page(out / "report.html", figures, drawn, why, notes.context(recs, figures), facts)
    document = build_document(evaluation, size, plan, members, figures, drawn, out, why)
    document.update(
        {
            "wall_s": wall,
            "failed": len(swept.document["failures"]),
            "recomputed_mismatches": built["mismatches"],
            "recomputed_runs": len(built["runs"]),
            "problems": problems,
        }
    )
    (out / "reproduction.json").write_text(
        json.dumps(document, indent=1, sort_keys=True, default=_json_default) + "\n"
    )
    progress.say(f"wrote {out / 'report.html'} and {out / 'reproduction.json'} ({wall:.0f} s)")
    return Reproduction(out, document, figures, problems)


def build_document(
    evaluation: str,
    size: Size,
    plan: Any,
    members: dict[str, list[int]],
    figures: Sequence[FigureResult],
    drawn: dict[str, list[tuple[Path, str]]],
    out: Path,
    why: dict[str, str] | None = None,
) -> dict[str, Any]:
    """reproduction.json but the facts only the finished runs know (wall_s, failed, problems,
    recomputed_*), which ``reproduce`` adds."""
    undecided = [
        {"figure": f.figure, "quantity": c.quantity, "note": c.undecided_note}
        for f in figures
        for c in f.checks
        if c.undecided
    ]
    return {
        "format": FORMAT,
        "version": 2,
        "evaluation": evaluation,
        "size": size.name,
        "size_note": size.note,
        "size_params": {
            k: getattr(size, k) for k in size.__dataclass_fields__ if k not in ("name", "note")
        },
        "seeds_per_point": seeds_per_point(plan.runs),
        "parts": {k: [plan.runs[i].run_id for i in v] for k, v in members.items()},
        "cause_parts": {
            k: {"figures": list(c.figures), "what": c.what}
            for k, c in CAUSE_PARTS.items()
            if k in members
        },
        "tolerance": TOLERANCE,
        "verdicts": list(VERDICTS),
        "our_parameters": paper.our_parameters(),
        "runs": len(plan.runs),
        "undecided": undecided,
        "figures": [
            {
                "figure": f.figure,
                "title": f.title,
                "verdict": figure_verdict(f.checks),
                "reproduced": figure_verdict(f.checks) == "reproduced",
                "caption": f.caption,
                "why": (why or {}).get(f.figure),
                "x_label": f.x_label or None,
                "y_label": f.y_label or None,
                "paper_series": {k: [list(p) for p in v] for k, v in f.paper_series.items()},
                "images": [str(p.relative_to(out)) for p, _ in drawn.get(f.figure, [])],
                "checks": [c.as_dict() for c in f.checks],
            }
            for f in figures
        ],
        "html": "report.html",
    }


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
    """Every figure's images (page.draw: ours and the paper's values on one plot, then the
    report's own drawing of the first seed's run)."""
    return page.draw(out, figures, built)
