"""``python -m airflow_provider_rocketmq.embedded [--port P] [--brokers N] [--queues Q] [--data-dir D]``."""

import sys

from ..commands.broker import main

sys.exit(main())
