"""Hooks of the RocketMQ provider."""
