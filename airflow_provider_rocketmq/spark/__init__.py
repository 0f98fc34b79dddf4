"""PySpark code run by spark-submit (no Airflow imports here).

`source/` is the ``rocketmq`` data source; `load/` is the load job. `LOAD_WINDOW_APP` is the
load job's file path, the ``application`` argument a DAG passes to ``SparkSubmitOperator``.
"""

from pathlib import Path

LOAD_WINDOW_APP: str = str(Path(__file__).with_name("load") / "load_window.py")

__all__ = ["LOAD_WINDOW_APP"]
