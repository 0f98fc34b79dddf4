"""The embedded broker's ACL 2.0 mode, beyond what the recorded 5.3.3 answers check
(tests/embedded/test_differential_recorded.py): its configuration, its Python API, switching modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_rocketmq.client import AclDeniedError, Admin, ClientConfig, Message, Producer
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.embedded import Acl2Config, EmbeddedCluster
from airflow_provider_rocketmq.embedded.acl2 import AuthRefusal, load_acl2


def test_configuration_errors_name_the_entry(tmp_path: Path) -> None:
    bad = {"users": [{"username": "u", "password": "p"}], "acls": {"u": [{"resource": "Topic:T", "actions": ["Eat"]}]}}
    (tmp_path / "a.json").write_text(json.dumps(bad), "utf-8")
    with pytest.raises(ConfigError, match=r"acl2\.acls\.u: unknown action 'Eat'"):
        load_acl2(tmp_path / "a.json")
    (tmp_path / "b.json").write_text(json.dumps({"acls": {"ghost": [{"resource": "Topic:T", "actions": ["Pub"]}]}}),
                                     "utf-8")
    with pytest.raises(ConfigError, match="The subject of User:ghost is not exist"):
        load_acl2(tmp_path / "b.json")
    (tmp_path / "c.yml").write_text("super_user: [root, root_secret]\nacls:\n  root:\n  - {resource: 'Queue:T', "
                                    "actions: [Pub]}\n", "utf-8")
    with pytest.raises(ConfigError, match="Queue:T"):
        load_acl2(tmp_path / "c.yml")
    with pytest.raises(ConfigError, match="cannot read"):
        load_acl2(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="ACL 1.0 .* or ACL 2.0"):
        EmbeddedCluster(acl={"accounts": []}, acl2=True)


def test_python_api_modes_and_case_insensitive_names() -> None:
    config = Acl2Config.coerce({"super_user": ["root", "root_secret"],
                                "users": [{"username": "app", "password": "app_secret"}],
                                "acls": {"app": [{"resource": "Topic:Api2", "actions": ["pub"], "decision": "allow"}]}})
    with EmbeddedCluster(queues=1, acl2=config) as cluster:
        cluster.create_topic("Api2", 1)
        app = ClientConfig(namesrv_addr=cluster.namesrv_addr, access_key="app", secret_key="app_secret")
        with Producer(app) as producer:
            assert producer.send(Message("Api2", b"x")).status == "SEND_OK"
        with pytest.raises(AuthRefusal, match="The user is existed"):
            cluster.create_user("app", "again")
        cluster.create_acl("app", ["Topic:Api2"], ["Pub"], "Deny")  # replaces the Allow entry
        with Producer(app) as producer, pytest.raises(AclDeniedError, match="the decision is deny"):
            producer.send(Message("Api2", b"y"))
        cluster.set_acl2(None)  # ACL off: anyone again
        with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr)) as producer:
            assert producer.send(Message("Api2", b"z")).status == "SEND_OK"
        with pytest.raises(ConfigError, match="does not run ACL 2.0"):
            cluster.create_user("late", "late_secret")
        cluster.set_acl2(True)  # the default super user only
        with Admin(ClientConfig(namesrv_addr=cluster.namesrv_addr, access_key="rocketmq",
                                secret_key="12345678")) as admin:
            assert sum(admin.high_water_marks("Api2").values()) == 2
