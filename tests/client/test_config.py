"""ClientConfig: validation names the field, namespaces, client id, secrets hidden."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.config import ClientConfig, check_topic, parse_namesrv
from airflow_provider_rocketmq.client.errors import ConfigError


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
