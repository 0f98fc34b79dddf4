"""Differential check: the same scripted client requests sent to a real broker and to the embedded
one, answers compared field by field (see docs/integration.md)."""
