"""Analysis above the drivers: Spark reports of run logs and parameter sweeps."""
