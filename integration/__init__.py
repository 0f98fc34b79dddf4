"""Real-broker integration suite (see docs/integration.md)."""
