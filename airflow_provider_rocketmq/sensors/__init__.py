"""Sensors of the RocketMQ provider."""
