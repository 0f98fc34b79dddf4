"""Operators of the RocketMQ provider."""
