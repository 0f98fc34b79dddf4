"""Triggers of the RocketMQ provider."""
