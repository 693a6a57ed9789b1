"""bench/compare.py (issue 15, acceptance items 1 and 6): its protocol checks catch a changed
message count, an oracle mismatch and a mean that moved by more than 1 %, and a tiny real run
against a worktree of HEAD itself imports each tree's own code and finds the protocol unchanged.
No timing is asserted."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_compare", REPO / "bench" / "compare.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_compare"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


compare = _load()

THESIS: dict[str, Any] = {
    "sim_messages": 751_918,
    "expected_deliveries": 130_371,
    "deliveries": 130_371,
    "missed": 0,
    "duplicates": 0,
    "false_positives": 0,
    "delivery_latency_ms": {"mean": 268.0878},
    "install_latency_ms": {"mean": 228.3},
    "bytes_per_event": 22_017.47,
    "bytes_per_subscription": 1_648.18,
    "sim_messages_per_s": 40_000.0,
}


def _failed(checks: list[Any]) -> list[str]:
    return [c.name for c in checks if not c.ok]


def test_thesis_checks_pass_on_identical_runs() -> None:
    assert _failed(compare.thesis_checks(THESIS, copy.deepcopy(THESIS))) == []


def test_thesis_checks_catch_a_changed_protocol() -> None:
    head = copy.deepcopy(THESIS)
    head["sim_messages"] += 1
    head["missed"] = 1
    head["delivery_latency_ms"]["mean"] *= 1.02  # outside 1 %
    head["install_latency_ms"]["mean"] *= 1.005  # inside 1 %
    assert _failed(compare.thesis_checks(THESIS, head)) == [
        "simulated messages",
        "missed",
        "delivery latency mean ms",
    ]
    # A field the other tree does not report fails rather than passing silently.
    del head["bytes_per_event"]
    assert "bytes per event" in _failed(compare.thesis_checks(THESIS, head))


def test_route_checks_leave_out_pings_only_when_one_tree_sent_none() -> None:
    by_type = {
        "Route": {"messages": 100, "bytes": 7_000},
        "HopAck": {"messages": 100, "bytes": 1_200},
    }
    head = {
        "sim_messages": 200,
        "sim_bytes": 8_200,
        "keepalives": False,
        "messages_by_type": by_type,
        "delivered": 50,
        "correct_root_fraction": 1.0,
        "duplicate_deliveries": 0,
        "mean_hops": 2.0,
        "mean_latency_ms": 100.0,
    }
    # a5c21ca has no "keepalives" field: it always sent them.
    base = {k: v for k, v in copy.deepcopy(head).items() if k != "keepalives"}
    base["messages_by_type"]["Ping"] = {"messages": 40, "bytes": 1_360}
    base["sim_messages"], base["sim_bytes"] = 240, 9_560
    assert _failed(compare.route_checks(base, head)) == []
    # The same keep-alive setting on both: the totals must match exactly.
    assert _failed(compare.route_checks(base, head | {"keepalives": True})) == [
        "simulated messages",
        "simulated bytes",
    ]
    assert "correct root fraction" in _failed(
        compare.route_checks(base, head | {"correct_root_fraction": 0.99})
    )


def test_summary_ratios_are_speed_ups() -> None:
    run = compare.RUNS[0]
    attempts = []
    for tree, wall, rate in (("base", 100.0, 40_000.0), ("head", 20.0, 200_000.0)):
        a = compare.Attempt(run.name, tree, 1, ok=True, wall_s=wall, rss_mib=500.0)
        a.result = THESIS | {"sim_messages_per_s": rate}
        attempts.append(a)
    s = compare.summarise(run, attempts)
    assert s["wall_ratio_base_over_head"] == pytest.approx(5.0)
    assert s["rate_ratio_head_over_base"] == pytest.approx(5.0)
    assert s["checks_ok"]
    assert "5.00x" in compare.table([s], attempts)


def test_options_a_tree_does_not_know_are_left_out(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for tree, text in ((old, "x.add_argument('--dht')"), (new, 'r.add_argument("--keepalives")')):
        (tree / "sim").mkdir(parents=True)
        (tree / "sim" / "rangecast.cli.py").write_text(text)
    run = next(r for r in compare.RUNS if r.name == "route-keepalives")
    assert "--keepalives" not in run.command(False, old)
    assert run.command(False, new)[-2:] == ("--keepalives", "on")


def test_unknown_base_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert compare.main(["--base", "no-such-rev-xyz", "--only", "route"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no-such-rev-xyz" in err


def test_tiny_real_run_against_head_itself(tmp_path: Path) -> None:
    """Base = HEAD: both trees run the same protocol, each from its own directory."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = tmp_path / "compare.json"
    cache = tmp_path / "cache"
    try:
        proc = subprocess.run(
            [
                sys.executable,
                str(REPO / "bench" / "compare.py"),
                "--quick",
                "--only",
                "route-keepalives",
                "--base",
                "HEAD",
                "--cache-dir",
                str(cache),
                "--json",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        for wt in cache.glob(".baseline-*"):
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(wt)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "route-keepalives: protocol unchanged" in proc.stdout
    report = json.loads(out.read_text())
    (summary,) = report["summaries"]
    assert summary["checks_ok"] and summary["failed"] == []
    base, head = report["attempts"]
    assert (base["tree"], head["tree"]) == ("base", "head")
    # Each tree ran its own sources, not the editable install's.
    assert base["meta"]["sim_file"].startswith(str(cache.resolve()))
    assert head["meta"]["sim_file"].startswith(str(REPO))
    assert base["meta"]["foreign_modules"] == head["meta"]["foreign_modules"] == []
    assert base["experiment"]["sim_messages"] == head["experiment"]["sim_messages"] > 0
    assert base["rss_mib"] > 0 and head["rss_mib"] > 0
