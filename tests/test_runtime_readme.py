"""The README's real-peer sequence, run as written: parsed out of README.md (so the two cannot
drift) and executed by ``sh`` against real peer processes on loopback. Only the ports (a free
range instead of 7400..), the swarm directory and, for the fast variant, the swarm size change."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_runtime_cli import PORTS, free_base, rc

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_sequence() -> str:
    """The first ``sh`` block of the README's "Real peers" section."""
    text = README.read_text()
    section = text[text.index("\n## Real peers\n") :]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match is not None, "no sh block in the README's Real peers section"
    return match.group(1)


def adapt(script: str, n: int, base: int, swarm_dir: Path, extra: str = "") -> str:
    """The README's script with our ports, directory and size: peer 74NN becomes base + NN % n."""
    assert "swarm up -n 16 " in script and "runs/swarm" in script
    script = script.replace("swarm up -n 16 ", f"swarm up -n {n} --base-port {base}{extra} ")
    script = script.replace("runs/swarm", str(swarm_dir))
    return re.sub(r"127\.0\.0\.1:74(\d\d)\b", lambda m: f"127.0.0.1:{base + int(m[1]) % n}", script)


def run_readme(
    tmp_path: Path, n: int, extra: str = "", base: int | None = None
) -> list[dict[str, Any]]:
    """Run the README's sequence, check that it delivered the event; its JSON lines."""
    base = free_base(n, *PORTS) if base is None else base
    swarm_dir = tmp_path / "swarm"
    script = adapt(readme_sequence(), n, base, swarm_dir, extra)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    try:
        done = subprocess.run(
            ["sh", "-e", "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=env,
            cwd=tmp_path,
        )
    finally:
        if (swarm_dir / "swarm.json").exists():
            rc("swarm", "down", "--dir", str(swarm_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    lines: list[dict[str, Any]] = []
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    sids = [x["subscribed"] for x in lines if "subscribed" in x]
    eids = [x["published"] for x in lines if "published" in x]
    events = [x for x in lines if "event" in x]
    assert len(sids) == 1 and len(eids) == 1, done.stdout
    assert [(e["sid"], e["event"]) for e in events] == [(sids[0], eids[0])], done.stdout
    assert events[0]["values"] == {"Attr1": 15.0, "Attr2": 0.0, "Attr3": 100.0, "Attr4": 2.0}
    assert any(x.get("stopped") == n for x in lines), done.stdout
    assert "routing" in done.stdout  # the peer status in between
    return lines


def test_the_readme_real_peer_sequence_on_four_peers(tmp_path: Path) -> None:
    run_readme(tmp_path, 4)


@pytest.mark.slow
def test_the_readme_real_peer_sequence_as_written_and_again(tmp_path: Path) -> None:
    """16 peers as in the README; then the whole sequence once more on the same directory and
    ports (``swarm up`` restarts the stopped swarm's peers)."""
    base = free_base(16, *PORTS)
    first = run_readme(tmp_path, 16, base=base)
    again = run_readme(tmp_path, 16, base=base)
    assert [x["restarted"] for x in first + again if "swarm" in x] == [0, 16]


@pytest.mark.slow
def test_the_readme_real_peer_sequence_on_kademlia(tmp_path: Path) -> None:
    run_readme(tmp_path, 4, " --dht kademlia")
