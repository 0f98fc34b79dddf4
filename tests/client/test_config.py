"""ClientConfig: validation names the field, namespaces, client id, secrets hidden."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.config import ClientConfig, parse_namesrv
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.client.protocol.names import check_topic


@pytest.mark.parametrize("kwargs,field", [
    ({"namesrv_addr": ""}, "namesrv_addr"),
    ({"namesrv_addr": "host"}, "namesrv_addr"),
    ({"namesrv_addr": "a:9876;b:99999"}, "namesrv_addr"),
    ({"access_key": "ak"}, "secret_key"),
    ({"secret_key": "sk"}, "access_key"),
    ({"security_token": "t"}, "security_token"),
    ({"request_timeout": 0}, "request_timeout"),
    ({"request_timeout": "3"}, "request_timeout"),
    ({"use_tls": "yes"}, "use_tls"),
    ({"instance_name": ""}, "instance_name"),
    ({"namespace": "a%b"}, "namespace"),
    ({"namespace": "has space"}, "namespace"),
])
def test_bad_values_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        ClientConfig(**kwargs).validate()  # type: ignore[arg-type]
    assert info.value.field == field
    assert str(info.value).startswith(field + ":")


def test_namesrv_list_forms() -> None:
    assert parse_namesrv("a:9876; b:9876;") == ["a:9876", "b:9876"]
    assert parse_namesrv("[::1]:9876,10.0.0.1:9876") == ["[::1]:9876", "10.0.0.1:9876"]
    assert ClientConfig(namesrv_addr="x:1;y:2").validate().namesrv_list() == ["x:1", "y:2"]


def test_namespace_wrapping_is_idempotent_and_reversible() -> None:
    cfg = ClientConfig(namespace="prod")
    assert cfg.with_namespace("Orders") == "prod%Orders"
    assert cfg.with_namespace("prod%Orders") == "prod%Orders"
    assert cfg.with_namespace("%RETRY%g") == "%RETRY%prod%g"
    assert cfg.with_namespace("%DLQ%g") == "%DLQ%prod%g"
    assert cfg.with_namespace("TBW102") == "TBW102"
    assert cfg.without_namespace("%RETRY%prod%g") == "%RETRY%g"
    assert cfg.without_namespace("prod%Orders") == "Orders"
    assert ClientConfig().with_namespace("Orders") == "Orders"


def test_client_id_and_secrets_hidden() -> None:
    cfg = ClientConfig(client_ip="10.1.2.3", instance_name="inst", unit_name="u",
                       access_key="ak", secret_key="very-secret", security_token="tok-secret")
    assert cfg.client_id() == "10.1.2.3@inst@u"
    assert ClientConfig(client_ip="10.1.2.3").client_id() == "10.1.2.3@DEFAULT"
    text = repr(cfg)
    assert "very-secret" not in text and "tok-secret" not in text and "ak" in text
    assert cfg.copy(instance_name="other").client_id() == "10.1.2.3@other@u"
    assert ClientConfig().client_ip  # detected without any network access


def test_check_topic() -> None:
    assert check_topic("Orders_1-%|x") == "Orders_1-%|x"
    for bad in ("", "a b", "x" * 128, None):
        with pytest.raises(ConfigError):
            check_topic(bad)


# -- env_client_options: the one way every command-line tool reads its connection settings ------------

def test_env_client_options() -> None:
    from airflow_provider_rocketmq.client.config import env_client_options

    assert env_client_options(environ={}) == {"namesrv_addr": "127.0.0.1:9876", "access_key": None,
                                              "secret_key": None, "security_token": None, "namespace": ""}
    env = {"NAMESRV_ADDR": "10.0.0.1:9876", "ROCKETMQ_ACCESS_KEY": "ak_12345", "ROCKETMQ_SECRET_KEY": "sk_12345",
           "ROCKETMQ_SECURITY_TOKEN": "tok", "ROCKETMQ_NAMESPACE": "ns1"}
    opts = env_client_options(environ=env)
    assert opts == {"namesrv_addr": "10.0.0.1:9876", "access_key": "ak_12345", "secret_key": "sk_12345",
                    "security_token": "tok", "namespace": "ns1"}
    assert env_client_options("127.0.0.1:1", environ=env)["namesrv_addr"] == "127.0.0.1:1"  # --namesrv wins
    cfg = ClientConfig(**opts).validate()
    assert cfg.acl_enabled and "sk_12345" not in repr(cfg) and "tok" not in repr(cfg)
    # empty variables count as unset
    assert env_client_options(environ={"ROCKETMQ_ACCESS_KEY": "", "ROCKETMQ_SECRET_KEY": ""})["access_key"] is None


@pytest.mark.parametrize("env,field", [
    ({"ROCKETMQ_ACCESS_KEY": "ak_12345"}, "ROCKETMQ_SECRET_KEY"),
    ({"ROCKETMQ_SECRET_KEY": "sk_12345"}, "ROCKETMQ_ACCESS_KEY"),
    ({"ROCKETMQ_ACCESS_KEY": "ak_12345", "ROCKETMQ_SECRET_KEY": ""}, "ROCKETMQ_SECRET_KEY"),
    ({"ROCKETMQ_SECURITY_TOKEN": "tok_12345"}, "ROCKETMQ_SECURITY_TOKEN"),
])
def test_env_client_options_errors_name_the_variable(env: dict[str, str], field: str) -> None:
    from airflow_provider_rocketmq.client.config import env_client_options

    with pytest.raises(ConfigError) as info:
        env_client_options(environ=env)
    assert info.value.field == field
    assert not any(v and v in str(info.value) for v in env.values())  # names, never values
