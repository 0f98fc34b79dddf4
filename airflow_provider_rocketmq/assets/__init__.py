"""Asset URIs of the RocketMQ provider (``rocketmq://<namesrv-or-conn>/<topic>``)."""
