"""Common-messaging integration (``MessageQueueTrigger(scheme="rocketmq", ...)``)."""
