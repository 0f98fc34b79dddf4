"""Reliability checks of the push consumer, through public surfaces only (PushConsumer, Producer,
Admin, the CLI, member processes); see docs/integration.md ("Reliability suite").

Each check prints one line ``reliability: <id> <what> <figures>``; pytest shows them all in a
"reliability figures" section of its summary. Quick mode (default, run by CI) uses small sizes;
``--full`` (``python -m integration.reliability --full``, or ``pytest integration/reliability
--reliability-full``) uses the issue's sizes.
"""
