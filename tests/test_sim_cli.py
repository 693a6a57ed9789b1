"""The ``rangecast sim`` command line, run as a user runs it: real processes, small sizes.

Bad input ends in exit 2 with one line on stderr naming the option, file or path, and no
traceback; ``--out`` is checked before any work; progress is a bar on a terminal, a few plain
lines otherwise, and never changes a result; the thesis' figures appear only next to a run of
the thesis' setting (issue 14, items 5-8 and 10).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

RANGECAST = str(Path(sys.executable).parent / "rangecast")
SMALL = ["--nodes", "60", "--subs-per-node", "2", "--events", "50"]
#: Thesis JSON fields that depend on the machine (sim.thesis_experiment.WALL_FIELDS).
WALL = ("wall_s", "sim_messages_per_s", "wall_phases_s")
DATA = Path(__file__).resolve().parents[1] / "data"


def run(*args: str, timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [RANGECAST, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def assert_one_line_error(p: subprocess.CompletedProcess, *fragments: str) -> None:
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert len(lines) == 1, p.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


# ------------------------------------------------------------------- item 5: non-finite numbers


@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("sim churn --nodes 60 --events 50 --session-median 100 --duration-s nan", "--duration-s"),
        ("sim churn --nodes 60 --events 50 --subs-per-node inf", "--subs-per-node"),
        ("sim run thesis --nodes 60 --events 50 --subs-per-node nan", "--subs-per-node"),
        ("sim lbdd --uplink-mbps nan", "--uplink-mbps"),
        ("sim route --nodes 60 --lookups 10 --loss inf", "--loss"),
    ],
)
def test_non_finite_option_is_refused_in_one_line(command: str, option: str) -> None:
    p = run(*command.split(), timeout=30)
    assert_one_line_error(p, option, "finite")


def test_plan_with_nan_is_refused_naming_file_and_key(tmp_path: Path) -> None:
    plan = tmp_path / "nan-plan.toml"
    plan.write_text("seeds = [1]\n[base]\nnodes = 60\nevents = 10\nsubs_per_node = nan\n")
    p = run("sim", "sweep", str(plan), "--out", str(tmp_path / "sweep"), timeout=60)
    assert_one_line_error(p, str(plan), "subs_per_node", "finite")
    assert not (tmp_path / "sweep").exists()  # refused before anything ran


# ------------------------------------------------------------- item 6: outputs checked first


@pytest.mark.parametrize("experiment", [["run", "thesis"], ["churn"]])
def test_unwritable_out_fails_at_once_naming_the_path(experiment: list[str]) -> None:
    # No --quiet: had any work started, its progress notes would be on stderr too.
    p = run("sim", *experiment, *SMALL, "--out", "/proc/x/run")
    assert_one_line_error(p, "/proc/x/run")


# ------------------------------------------------------------------ item 8: churn --out, help


def test_churn_writes_a_run_log(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "churn-log"
    p = run(
        "sim", "churn", "--nodes", "40", "--subs-per-node", "1", "--events", "20",
        "--out", str(out), "--json", "--quiet",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    summary = json.loads(p.stdout)
    doc = json.loads((out / "run.json").read_text())
    assert doc["format"] == "rangecast-run-log" and doc["version"] == 1
    assert doc["kind"] == "churn" and doc["params"]["scenario"] == "churn"
    assert doc["summary"] == summary
    assert pq.read_metadata(out / "messages.parquet").num_rows == summary["sim_messages"]
    nodes = pq.read_table(out / "nodes.parquet")
    assert nodes.num_rows == 40
    assert nodes.column("alive").to_pylist().count(False) == summary["crashed"]


def test_help_names_planetlab_and_shows_each_default_once() -> None:
    lbdd = run("sim", "lbdd", "--help").stdout
    assert "planetlab" in lbdd
    for command in (["sim", "run", "thesis"], ["sim", "churn"], ["peer", "start"]):
        text = " ".join(run(*command, "--help").stdout.split())  # undo the line wrapping
        assert "(default: None)" not in text, command
        assert not re.search(r"\(default: [^)]*\) \(default:", text), command
    thesis = " ".join(run("sim", "run", "thesis", "--help").stdout.split())
    assert "overlay size (default: 1000)" in thesis


# ------------------------------------------------------------------------- item 8: progress


def test_progress_without_a_terminal_is_a_few_plain_lines() -> None:
    for args in (
        ["sim", "run", "thesis", *SMALL],
        ["sim", "route", "--nodes", "60", "--lookups", "100", "--bootstrap", "join"],
    ):
        p = run(*args)
        assert p.returncode == 0, p.stderr
        lines = p.stderr.splitlines()
        assert 1 <= len(lines) <= 6, p.stderr
        for line in lines:
            assert line.startswith("[") and "{" not in line and "\r" not in line, line
            # Rounded: no float with a long tail of digits.
            assert not re.search(r"\d\.\d{4,}", line), line


def _on_a_terminal(args: list[str]) -> tuple[int, str, str]:
    """Run with stderr on a pseudo-terminal (80 columns); (exit code, stdout, stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(
        [RANGECAST, *args], stdout=subprocess.PIPE, stderr=slave, text=True, close_fds=True
    )
    os.close(slave)
    err = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the child closed its end
                chunk = b""
            if chunk:
                err += chunk
                continue
        if proc.poll() is not None and not ready:
            break
        if ready and not chunk:
            break
    os.close(master)
    out = proc.stdout.read() if proc.stdout else ""
    return proc.wait(timeout=60), out, err.decode(errors="replace")


def test_progress_bar_on_a_terminal_changes_no_result() -> None:
    code, out, err = _on_a_terminal(["sim", "run", "thesis", *SMALL, "--json"])
    assert code == 0, err
    # tqdm bars with a known total and an ETA ("[elapsed<remaining]").
    assert re.search(r"publishing: +100%.*\b50/50 \[\d\d:\d\d<\d\d:\d\d", err), err
    assert "installing:" in err
    quiet = run("sim", "run", "thesis", *SMALL, "--json", "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""
    with_bars, without = json.loads(out), json.loads(quiet.stdout)
    for k in WALL:
        with_bars.pop(k), without.pop(k)
    assert with_bars == without


# ------------------------------------------------------------ item 10: the thesis comparison


def test_no_thesis_figures_next_to_another_setting() -> None:
    p = run("sim", "run", "thesis", *SMALL, "--quiet")
    assert p.returncode == 0, p.stderr
    assert "(thesis:" not in p.stdout
    assert p.stdout.count("no thesis comparison: 60 nodes, thesis ran 1,000;") == 1


def test_thesis_comparison_field() -> None:
    from rangecast.sim.thesis_experiment import ThesisParams, thesis_comparison

    assert thesis_comparison(ThesisParams(seed=7), 5000, 10_000) == {
        "applies": True,
        "differences": [],
    }
    off = thesis_comparison(ThesisParams(nodes=100, events_from="x/air.csv"), 500, 10_000)
    assert off["applies"] is False
    assert off["differences"] == [
        "100 nodes, thesis ran 1,000",
        "500 subscriptions, thesis installed 5,000",
        "events from air.csv, thesis generated its own (Table 4.3)",
    ]


# ------------------------------------------------------------------ item 7: CSV from the CLI


def test_events_from_a_csv_with_any_header(tmp_path: Path) -> None:
    csv = tmp_path / "export.csv"
    csv.write_text("0,1,temp C,date\n1,2,3,2020-01-01\n4,,NA,2020-01-02\n7,8,6,2020-01-03\n")
    args = ["sim", "run", "thesis", *SMALL, "--events-from", str(csv), "--missing", "NA"]
    p = run(*args, "--quiet")
    assert p.returncode == 0, p.stderr
    assert "columns used: 0, 1, temp C" in p.stdout
    assert "skipped columns    date (not numeric)" in p.stdout
    assert "renamed columns    '0' -> _0, '1' -> _1, 'temp C' -> temp_C" in p.stdout
    j = json.loads(run(*args, "--json", "--quiet").stdout)
    assert j["csv"]["columns_used"] == ["0", "1", "temp C"]
    assert j["csv"]["skipped_columns"] == [{"name": "date", "reason": "not numeric"}]
    assert {r["column"]: r["attribute"] for r in j["csv"]["renamed_columns"]} == {
        "0": "_0",
        "1": "_1",
        "temp C": "temp_C",
    }
    assert j["thesis_comparison"]["applies"] is False


def test_events_from_csv_errors_name_file_and_column(tmp_path: Path) -> None:
    huge = tmp_path / "huge.csv"
    huge.write_text("a,b\n1e308,1\n-1e308,2\n")
    p = run("sim", "run", "thesis", *SMALL, "--events-from", str(huge))
    assert_one_line_error(p, str(huge), "line 2", "column 'a'")
    header = tmp_path / "header.csv"
    header.write_text("a,b\n")
    p = run("sim", "run", "thesis", *SMALL, "--events-from", str(header))
    assert_one_line_error(p, str(header), "no data rows")


def test_airquality_reports_used_and_skipped_columns() -> None:
    air = DATA / "airquality_uci.csv"
    args = ["sim", "run", "thesis", *SMALL, "--events-from", str(air), "--missing", "-200"]
    p = run(*args, "--json", "--quiet")
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)["csv"]
    assert len(c["columns_used"]) == 13 and c["columns_used"][0] == "CO(GT)"
    assert [k["name"] for k in c["skipped_columns"]] == ["Date", "Time"]
    assert c["renamed_columns"] == []


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["--cutoff", "2", "--lb", "on"], "--cutoff 2.0: must be in (4 x widen, 1] (widen 0.001)"),
        (["--p", "1.5"], "--p 1.5: must be a probability, in [0, 1]"),
        (["--min-level", "99"], "--min-level 99: must be in [0, 60]"),
        (["--min-level", "5", "--max-level", "4"], "--min-level 5: must be at most --max-level"),
    ],
)
def test_overlay_options_are_named_with_their_value(
    args: list[str], want: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30 item 2: a bad overlay option of ``sim run thesis`` names the option and its
    value (not OverlayConfig's field), in one line, exit 2, before anything runs."""
    from rangecast.cli.main import main

    assert main(["sim", "run", "thesis", "--nodes", "30", "--events", "5", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"rangecast: error: {want}"), err


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["sim", "run", "partition", "--nodes", "1"], "--nodes 1: must be at least 2"),
        (["sim", "run", "crash-root", "--replicas", "12"], "--replicas 12: must be in [1, 9]"),
        (["sim", "run", "crash-root", "--events", "-3"], "--events -3: must be at least 0"),
        (["sim", "run", "siena", "--arity", "0"], "--arity 0: must be at least 1"),
        (["sim", "compare", "--nodes", "1"], "--nodes 1: must be at least 2"),
    ],
)
def test_scenario_checks_name_the_one_option_that_failed(
    args: list[str], want: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30 item 4: a scenario's check names the option that failed and its value, not a
    list of conditions to check by hand (``sim.scenario.require``)."""
    from rangecast.cli.main import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"rangecast: error: {want}"), err


def test_overlay_config_errors_name_the_field_in_python() -> None:
    """Outside the command line the field is named as in Python; the error survives a trip
    to a sweep's worker process (pickled from its parts)."""
    import pickle

    from rangecast.dht.errors import FieldError
    from rangecast.pubsub.base import OverlayConfig

    with pytest.raises(FieldError) as err:
        OverlayConfig(load_balancing=True, cutoff=2.0)
    assert str(err.value) == "cutoff 2.0: must be in (4 x widen, 1] (widen 0.001)"
    again = pickle.loads(pickle.dumps(err.value))
    assert (again.field, again.value, str(again)) == ("cutoff", 2.0, str(err.value))


def test_a_route_size_that_cannot_fit_is_refused_up_front(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30 item 5: `sim route --nodes 100000000` printed nothing for 300 s; a size whose
    estimated memory exceeds what is available is refused at once, naming both."""
    from rangecast.dht.errors import LocalProtocolError
    from rangecast.sim import route_experiment as re_
    from rangecast.sim import scenario

    # The one memory check (sim.scenario.refuse_beyond_memory) reads the machine's memory here.
    monkeypatch.setattr(scenario, "available_bytes", lambda: 2**30)
    with pytest.raises(LocalProtocolError, match=r"--nodes 1,000,000: needs about 5\.0 GiB"):
        re_.RouteParams(nodes=1_000_000).check()
    re_.RouteParams(nodes=10_000).check()  # 250 MiB: fits
    monkeypatch.setattr(scenario, "available_bytes", lambda: None)  # nothing to read: no check
    re_.RouteParams(nodes=1_000_000).check()
