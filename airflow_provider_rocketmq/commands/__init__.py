"""Core rocketmq-airflow sub-commands (produce, lag, topic)."""
