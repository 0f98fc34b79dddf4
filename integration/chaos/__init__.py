"""Chaos proof of exactly-once: the window -> load -> commit flow under randomized faults.

``python -m integration.chaos`` (see ``__main__.py`` and docs/reliability.md).
"""
