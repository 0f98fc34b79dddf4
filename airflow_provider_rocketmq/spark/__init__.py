"""PySpark applications run by SparkSubmitOperator (no Airflow imports here).

`load_window.py` loads staged windows; `LOAD_WINDOW_APP` is its file path, the
``application`` argument a DAG passes to ``SparkSubmitOperator``.
"""

from pathlib import Path

LOAD_WINDOW_APP: str = str(Path(__file__).with_name("load_window.py"))

__all__ = ["LOAD_WINDOW_APP"]
