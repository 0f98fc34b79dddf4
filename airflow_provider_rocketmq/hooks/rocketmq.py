"""RocketMQHook: an Airflow `rocketmq` connection -> configured client objects."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_rocketmq.airflow_compat import BaseHook, default_conn_id
from airflow_provider_rocketmq.client import ConfigError
from airflow_provider_rocketmq.hooks.connection_config import (
    client_config_kwargs,
    config_field_names,
)

if TYPE_CHECKING:
    from airflow_provider_rocketmq.client import (
        Admin,
        AsyncAdmin,
        ClientConfig,
        ConsumerConfig,
        Producer,
        PushConsumer,
    )

C = TypeVar("C", bound="ClientConfig")  # ClientConfig or ConsumerConfig

# config field -> the connection field a user has to fix (errors name what the user typed)
_FIELD_SOURCES = {
    "namesrv_addr": "host",
    "access_key": "login",
    "secret_key": "password",
    "security_token": "extra.security_token",
    "namespace": "extra.namespace",
    "use_tls": "extra.tls",
    "request_timeout": "extra.request_timeout",
}


class RocketMQHook(BaseHook):
    """Build RocketMQ clients (admin, producer, push consumer) from an Airflow connection.

    The connection is read and validated lazily, on first use; a bad field raises
    `ConfigError` whose ``field`` is the connection field (``host``, ``login``,
    ``extra.tls``, ``extra.client_options.<knob>``...). Credentials are never logged
    and never appear in ``repr``.

    :param rocketmq_conn_id: id of a connection of type ``rocketmq``; ``None`` (the default)
        means ``[rocketmq] default_conn_id`` (itself ``rocketmq_default`` unless configured).
    """

    conn_name_attr = "rocketmq_conn_id"
    default_conn_name = "rocketmq_default"
    conn_type = "rocketmq"
    hook_name = "Apache RocketMQ"

    def __init__(self, rocketmq_conn_id: str | None = None) -> None:
        super().__init__()
        self.rocketmq_conn_id = rocketmq_conn_id or default_conn_id()
        self._config_kwargs: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rocketmq_conn_id={self.rocketmq_conn_id!r})"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Relabel the generic connection form for RocketMQ (get_provider_info's ``ui-field-behaviour``)."""
        from airflow_provider_rocketmq.get_provider_info import UI_FIELD_BEHAVIOUR

        return {key.replace("-", "_"): value for key, value in UI_FIELD_BEHAVIOUR.items()}

    # -- configuration ---------------------------------------------------------------------------
    @staticmethod
    def config_kwargs_from_connection(conn: Any) -> dict[str, Any]:
        """Validated ClientConfig/ConsumerConfig keyword arguments of a connection object."""
        from airflow_provider_rocketmq.client import ConsumerConfig

        kwargs = client_config_kwargs(
            host=conn.host,
            port=conn.port,
            login=conn.login,
            password=conn.password,
            extra=conn.extra_dejson,
            allowed_options=config_field_names(ConsumerConfig),
        )
        # let the client check value ranges too (e.g. a client option of the wrong type)
        _build(ConsumerConfig, kwargs)
        return kwargs

    def _get_config_kwargs(self) -> dict[str, Any]:
        if self._config_kwargs is None:
            self._config_kwargs = self.config_kwargs_from_connection(self.get_connection(self.rocketmq_conn_id))
        return self._config_kwargs

    async def _aget_config_kwargs(self) -> dict[str, Any]:
        if self._config_kwargs is None:
            # The synchronous getters in a worker thread, on every supported Airflow: 3.0 has no
            # BaseHook.aget_connection, and before 3.3.2 it (and extra_dejson) masks secrets with a
            # synchronous supervisor call that refuses to run on the triggerer's event loop.
            from asgiref.sync import sync_to_async

            await sync_to_async(self._get_config_kwargs, thread_sensitive=False)()
        assert self._config_kwargs is not None
        return self._config_kwargs

    def get_client_config(self) -> ClientConfig:
        """The connection as a validated `ClientConfig` (consumer-only options dropped)."""
        from airflow_provider_rocketmq.client import ClientConfig

        return _client_config(ClientConfig, self._get_config_kwargs())

    def get_consumer_config(self, **overrides: Any) -> ConsumerConfig:
        """The connection as a validated `ConsumerConfig`; ``overrides`` win over connection options."""
        return _consumer_config(self._get_config_kwargs(), overrides)

    async def aget_consumer_config(self, **overrides: Any) -> ConsumerConfig:
        """Like `get_consumer_config`, reading the connection without blocking the event loop."""
        return _consumer_config(await self._aget_config_kwargs(), overrides)

    # -- clients ---------------------------------------------------------------------------------
    def get_conn(self) -> Admin:
        """The admin client (Airflow's generic accessor)."""
        return self.get_admin()

    def get_admin(self) -> Admin:
        """A sync `Admin` (context manager; close it when done)."""
        config = self.get_client_config()  # a bad connection fails here, naming its field
        from airflow_provider_rocketmq.client import Admin

        return Admin(config)

    def get_async_admin(self) -> AsyncAdmin:
        """An `AsyncAdmin` for triggers (not started; ``async with`` it)."""
        config = self.get_client_config()
        from airflow_provider_rocketmq.client import AsyncAdmin

        return AsyncAdmin(config)

    async def aget_async_admin(self) -> AsyncAdmin:
        """Like `get_async_admin` but reads the connection without blocking the event loop."""
        from airflow_provider_rocketmq.client import AsyncAdmin, ClientConfig

        return AsyncAdmin(_client_config(ClientConfig, await self._aget_config_kwargs()))

    def get_producer(self, group: str = "DEFAULT_PRODUCER") -> Producer:
        """A sync `Producer` (context manager)."""
        config = self.get_client_config()
        from airflow_provider_rocketmq.client import Producer

        return Producer(config, group=group)

    def get_consumer(
        self,
        group: str,
        topic: str,
        expression: str = "*",
        listener: Callable[..., Any] | None = None,
        *,
        orderly: bool = False,
        **overrides: Any,
    ) -> PushConsumer:
        """A configured, not yet started `PushConsumer` subscribed to ``topic``/``expression``.

        ``overrides`` are `ConsumerConfig` fields (``consume_from_where``,
        ``enable_offset_commit``...); they win over the connection's client options.
        """
        if not group or not isinstance(group, str):
            raise ConfigError("group", "a consumer group name is required")
        if not topic or not isinstance(topic, str):
            raise ConfigError("topic", "a topic name is required")
        from airflow_provider_rocketmq.client import PushConsumer

        consumer = PushConsumer(group, self.get_consumer_config(**overrides))
        consumer.subscribe(topic, expression)
        if listener is not None:
            consumer.register_listener(listener, orderly=orderly)
        return consumer

    def test_connection(self) -> tuple[bool, str]:
        """Round trip to the name servers: ask for the cluster's brokers (never raises)."""
        try:
            config = self.get_client_config()
            from airflow_provider_rocketmq.client import Admin

            # Admin runs on a private loop thread: test_connection may be called from a running loop
            with Admin(config, timeout=config.request_timeout * 4 + 5) as admin:
                brokers = admin.broker_names()
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"
        if not brokers:
            return False, f"name server(s) {config.namesrv_addr} answered but know no broker"
        return True, f"Connected to {config.namesrv_addr}: broker(s) {', '.join(brokers)}"


def _build(config_cls: type[C], kwargs: dict[str, Any], overrides: set[str] | None = None) -> C:
    """Instantiate and validate a config, naming the connection field on error."""
    try:
        config = config_cls(**kwargs)
        config.validate()  # ConsumerConfig.validate() returns None, ClientConfig's returns self
        return config
    except ConfigError as exc:
        if overrides and exc.field in overrides:
            raise
        source = _FIELD_SOURCES.get(exc.field, f"extra.client_options.{exc.field}")
        raise ConfigError(source, str(exc).split(": ", 1)[-1]) from None
    except TypeError as exc:  # an option the config class does not know
        raise ConfigError("extra.client_options", str(exc)) from None


def _consumer_config(connection_kwargs: dict[str, Any], overrides: dict[str, Any]) -> ConsumerConfig:
    from airflow_provider_rocketmq.client import ConsumerConfig

    unknown = sorted(set(overrides) - config_field_names(ConsumerConfig))
    if unknown:  # not a connection problem: name the override itself
        raise ConfigError(unknown[0], "unknown consumer option")
    return _build(ConsumerConfig, {**connection_kwargs, **overrides}, overrides=set(overrides))


def _client_config(config_cls: type[C], kwargs: dict[str, Any]) -> C:
    allowed = config_field_names(config_cls)
    return _build(config_cls, {k: v for k, v in kwargs.items() if k in allowed})
