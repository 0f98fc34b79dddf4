"""RocketMQHook connection parsing: what a user sees for good and bad connections (no broker)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.hooks.connection_config import KNOWN_EXTRAS
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook

SECRET = "s3cr3t-Secret-Key"


def test_full_connection_maps_onto_client_and_consumer_config(airflow_conn: Any) -> None:
    with airflow_conn(
        "rmq_full", host="ns1; ns2:9877", port=9999, login="AK", password=SECRET,
        extra={"namespace": "prod", "tls": "true", "request_timeout": "7.5",
               "client_options": {"instance_name": "etl", "pull_batch_size": 64}},
    ) as cid:
        hook = RocketMQHook(cid)
        cfg = hook.get_client_config()
        assert cfg.namesrv_addr == "ns1:9999;ns2:9877"
        assert (cfg.access_key, cfg.secret_key) == ("AK", SECRET)
        assert (cfg.namespace, cfg.use_tls, cfg.request_timeout, cfg.instance_name) == ("prod", True, 7.5, "etl")
        ccfg = hook.get_consumer_config(pull_batch_size=16, enable_offset_commit=False)
        assert (ccfg.pull_batch_size, ccfg.enable_offset_commit, ccfg.namespace) == (16, False, "prod")
        assert SECRET not in repr(hook) and SECRET not in repr(cfg) and SECRET not in repr(ccfg)


def test_namesrv_extra_wins_and_default_port_applies(airflow_conn: Any) -> None:
    with airflow_conn("rmq_ns", extra={"namesrv": "10.0.0.1,10.0.0.2:9000"}) as cid:
        assert RocketMQHook(cid).get_client_config().namesrv_addr == "10.0.0.1:9876;10.0.0.2:9000"


def test_legacy_prefixed_extras_are_accepted(airflow_conn: Any) -> None:
    with airflow_conn("rmq_legacy", host="h", extra={"extra__rocketmq__tls": True}) as cid:
        assert RocketMQHook(cid).get_client_config().use_tls is True


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({}, "host"),
        ({"host": "h:notaport"}, "host"),
        ({"host": "h", "port": 70000}, "port"),
        ({"host": "h", "login": "AK"}, "password (secret key)"),
        ({"host": "h", "password": SECRET}, "login (access key)"),
        ({"host": "h", "extra": {"tls": "maybe"}}, "extra.tls"),
        ({"host": "h", "extra": {"request_timeout": -1}}, "extra.request_timeout"),
        ({"host": "h", "extra": {"request_timeout": 9999}}, "extra.request_timeout"),
        ({"host": "h", "extra": {"namespace": "a%b"}}, "extra.namespace"),
        ({"host": "h", "extra": {"security_token": "t"}}, "extra.security_token"),
        ({"host": "h", "extra": {"nmesrv": "typo:1"}}, "extra.nmesrv"),
        ({"host": "h", "extra": {"client_options": {"pull_batch_sise": 3}}},
         "extra.client_options.pull_batch_sise"),
        ({"host": "h", "extra": {"client_options": {"pull_batch_size": 0}}}, "extra.client_options.pull_batch_size"),
        ({"host": "h", "extra": {"client_options": {"secret_key": "x"}}}, "extra.client_options.secret_key"),
        ({"host": "h", "extra": {"client_options": "[1"}}, "extra.client_options"),
    ],
)
def test_invalid_connection_fails_at_use_naming_the_field(airflow_conn: Any, fields: dict, bad_field: str) -> None:
    with airflow_conn("rmq_bad", **fields) as cid:
        hook = RocketMQHook(cid)  # constructing never fails: the connection is read at use
        with pytest.raises(ConfigError) as err:
            hook.get_client_config()
    assert err.value.field == bad_field
    assert bad_field in str(err.value)


@pytest.mark.parametrize(("override", "field"), [({"consume_thread_min": 0}, "consume_thread_min"),
                                                  ({"pull_batch_sise": 4}, "pull_batch_sise")])
def test_consumer_override_errors_name_the_override(airflow_conn: Any, override: dict, field: str) -> None:
    with airflow_conn("rmq_ovr", host="h") as cid, pytest.raises(ConfigError) as err:
        RocketMQHook(cid).get_consumer("g", "t", **override)
    assert err.value.field == field


def test_get_consumer_requires_group_and_topic(airflow_conn: Any) -> None:
    with airflow_conn("rmq_gt", host="h") as cid, pytest.raises(ConfigError) as err:
        RocketMQHook(cid).get_consumer("", "topic")
    assert err.value.field == "group"


def test_secret_never_logged_when_connection_is_bad(airflow_conn: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with airflow_conn("rmq_log", host="h", login="AK", password=SECRET, extra={"tls": "x"}) as cid:
        ok, message = RocketMQHook(cid).test_connection()
    assert not ok and "extra.tls" in message
    assert SECRET not in message and SECRET not in caplog.text


def test_provider_info_declares_the_connection_type() -> None:
    from airflow_provider_rocketmq.get_provider_info import get_provider_info

    info = get_provider_info()
    (conn,) = info["connection-types"]
    assert conn["connection-type"] == "rocketmq"
    assert conn["hook-class-name"] == f"{RocketMQHook.__module__}.{RocketMQHook.__qualname__}"
    # every extra the parser accepts has a form field, and no form field is rejected by the parser
    assert set(conn["conn-fields"]) == set(KNOWN_EXTRAS)
    assert conn["conn-fields"]["security_token"]["schema"]["format"] == "password"
    assert RocketMQHook.get_ui_field_behaviour() == {
        "hidden_fields": ["schema"],
        "relabeling": {"host": "Name servers", "login": "Access key", "password": "Secret key"},
        "placeholders": conn["ui-field-behaviour"]["placeholders"],
    }
