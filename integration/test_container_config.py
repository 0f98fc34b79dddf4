"""The testcontainers backend's container configuration, checked without a Docker engine."""

from __future__ import annotations

import re
import socket
import threading

import pytest

from integration import containers
from integration.containers import (
    BROKER_CONF_PATH,
    DEFAULT_IMAGE_TAG,
    SUITE_LABEL,
    RyukChoice,
    broker_conf,
    docker_engine_answers,
    free_listen_port,
    image_for,
    rocketmq_specs,
    ryuk_choice,
)


def _conf(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_default_image_is_a_4_9_release(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETMQ_IMAGE_TAG", raising=False)
    assert DEFAULT_IMAGE_TAG.startswith("4.9.")
    assert image_for() == f"apache/rocketmq:{DEFAULT_IMAGE_TAG}"


def test_image_tag_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCKETMQ_IMAGE_TAG", containers.DOCUMENTED_5X_TAG)
    ns, br = rocketmq_specs()
    assert ns.image == br.image == f"apache/rocketmq:{containers.DOCUMENTED_5X_TAG}"


def test_bad_image_tag_is_rejected_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCKETMQ_IMAGE_TAG", "4.9.7; rm -rf /")
    with pytest.raises(ValueError, match="ROCKETMQ_IMAGE_TAG"):
        rocketmq_specs()


@pytest.mark.parametrize("repository", ["apache/rocketmq", "rocketmq", "registry.example.com:5000/mq/rocketmq",
                                        "localhost/my_org/rocket-mq", "ghcr.io/acme/rocketmq__broker"])
def test_image_repository_comes_from_the_environment(repository: str) -> None:
    assert image_for({"ROCKETMQ_IMAGE": repository}) == f"{repository}:{DEFAULT_IMAGE_TAG}"
    assert image_for({"ROCKETMQ_IMAGE": repository, "ROCKETMQ_IMAGE_TAG": "5.3.3"}) == f"{repository}:5.3.3"
    ns, br = rocketmq_specs(image=image_for({"ROCKETMQ_IMAGE": repository}))
    assert ns.image == br.image == f"{repository}:{DEFAULT_IMAGE_TAG}"


@pytest.mark.parametrize("repository, hint", [
    ("apache/rocketmq:5.3.3", "put the tag in ROCKETMQ_IMAGE_TAG"),
    ("apache/rocketmq@sha256:0123", "put the tag in ROCKETMQ_IMAGE_TAG"),
    ("Apache/RocketMQ", "e.g. apache/rocketmq"),
    ("apache//rocketmq", "e.g. apache/rocketmq"),
    ("apache/rocketmq; rm -rf /", "e.g. apache/rocketmq"),
])
def test_bad_image_repository_is_rejected_naming_the_variable(repository: str, hint: str) -> None:
    with pytest.raises(ValueError, match=r"^ROCKETMQ_IMAGE: ") as err:
        image_for({"ROCKETMQ_IMAGE": repository})
    assert hint in str(err.value)


def test_blank_image_settings_take_the_defaults() -> None:
    assert image_for({"ROCKETMQ_IMAGE": " ", "ROCKETMQ_IMAGE_TAG": ""}) == f"apache/rocketmq:{DEFAULT_IMAGE_TAG}"


def test_name_server_container_spec() -> None:
    ns, _ = rocketmq_specs("10.1.2.3", tag="4.9.7", namesrv_host_port=19876)
    assert ns.image == "apache/rocketmq:4.9.7"
    assert ns.command == ["sh", "mqnamesrv"]
    assert ns.ports == {9876: 19876}
    assert ns.network_aliases == ("namesrv",)
    assert "-Xmx" in ns.env["JAVA_OPT_EXT"]
    assert ns.files == {}


def test_broker_container_spec_advertises_a_host_reachable_address() -> None:
    _, br = rocketmq_specs("10.1.2.3", tag="4.9.7", broker_listen_port=20911)
    assert br.command == ["sh", "mqbroker", "-n", "namesrv:9876", "-c", BROKER_CONF_PATH]
    assert br.env["NAMESRV_ADDR"] == "namesrv:9876"
    # same number inside and outside, for the listen port, the VIP channel (-2) and HA (+1)
    assert br.ports == {20911: 20911, 20909: 20909, 20912: 20912}
    conf = _conf(br.files[BROKER_CONF_PATH])
    assert conf["brokerIP1"] == "10.1.2.3"
    assert conf["listenPort"] == "20911"
    assert conf["namesrvAddr"] == "namesrv:9876"
    assert conf["brokerName"] == "broker-a"
    assert conf["brokerClusterName"] == "DefaultCluster"
    assert conf["brokerId"] == "0"
    assert conf["autoCreateSubscriptionGroup"] == "true"
    # the property 4.9 and 5.x read (the old spelling mapedFileSizeCommitLog is ignored: 1 GiB files)
    assert conf["mappedFileSizeCommitLog"] == str(64 * 1024 * 1024)
    assert "mapedFileSizeCommitLog" not in conf


def test_default_ports_are_the_standard_ones() -> None:
    ns, br = rocketmq_specs()
    assert ns.ports == {9876: 9876}
    assert set(br.ports) == {10911, 10909, 10912}


def test_free_listen_port_leaves_room_for_the_vip_and_ha_ports() -> None:
    import random

    p = free_listen_port(rng=random.Random(7))
    assert p - 2 >= 20009 and p + 1 <= 30000
    with socket.socket() as taken:  # the same start again, with p's HA port taken: another triple
        taken.bind(("127.0.0.1", p + 1))
        q = free_listen_port(rng=random.Random(7))
    assert q != p and {q - 2, q, q + 1}.isdisjoint({p + 1})


def test_broker_conf_is_key_value_lines() -> None:
    text = broker_conf("192.168.1.5", 10911)
    assert text.endswith("\n")
    assert all(re.fullmatch(r"[A-Za-z0-9]+=[^\n=]*", line) for line in text.splitlines())


# Lines printed by the 4.9.7 and 5.x NamesrvStartup / BrokerStartup.
NAMESRV_LOGS = [
    "The Name Server boot success. serializeType=JSON",
    "The Name Server boot success. serializeType=JSON, address 0.0.0.0:9876",
]
BROKER_LOGS = [
    "The broker[broker-a, 172.18.0.3:10911] boot success. serializeType=JSON and name server is namesrv:9876",
    "The broker[broker-a, 10.1.2.3:20911] boot success. serializeType=JSON",
]


def test_ready_logs_match_the_boot_lines() -> None:
    ns, br = rocketmq_specs()
    for line in NAMESRV_LOGS:
        assert re.search(ns.ready_log, f"noise\n{line}\n", re.MULTILINE)
        assert not re.search(br.ready_log, line)
    for line in BROKER_LOGS:
        assert re.search(br.ready_log, f"noise\n{line}\n", re.MULTILINE)
        assert not re.search(ns.ready_log, line)
    assert not re.search(br.ready_log, "The broker[broker-a, 172.18.0.3:10911] shutdown")


def test_wait_strategies_are_log_based() -> None:
    wait_strategies = pytest.importorskip("testcontainers.core.wait_strategies")
    for spec in rocketmq_specs():
        assert isinstance(spec.wait_strategy(), wait_strategies.LogMessageWaitStrategy)


def test_testcontainers_objects_carry_the_specs() -> None:
    """The DockerContainer objects the backend would start, built without a Docker engine."""
    pytest.importorskip("testcontainers")
    from testcontainers.core.network import Network

    offline = {"version": "1.41"}  # a fixed API version: docker-py does not contact the engine
    network = Network(docker_client_kw=offline)
    ns_spec, br_spec = rocketmq_specs("10.1.2.3", tag="4.9.7", broker_listen_port=20911)
    ns = containers.build_container(ns_spec, network, offline)
    br = containers.build_container(br_spec, network, offline)
    assert ns.image == br.image == "apache/rocketmq:4.9.7"
    assert ns.ports == {"9876": 9876}
    assert br.ports == {"20911": 20911, "20909": 20909, "20912": 20912}
    assert br.env["NAMESRV_ADDR"] == "namesrv:9876" and "JAVA_OPT_EXT" in br.env
    # testcontainers keeps these on private attributes; there is no public getter
    assert br._command == br_spec.command
    assert ns._network is network and br._network is network
    assert ns._network_aliases == ["namesrv"] and br._network_aliases == ["broker"]
    (content, path, _mode), = br._transferable_specs
    assert path == BROKER_CONF_PATH and content.decode() == br_spec.files[BROKER_CONF_PATH]
    assert ns._transferable_specs == []
    assert re.search(br._wait_strategy._message.pattern, BROKER_LOGS[0])
    assert re.search(ns._wait_strategy._message.pattern, NAMESRV_LOGS[0])


def _never_present(image: str) -> bool:
    return False


def test_ryuk_runs_when_its_image_is_in_the_engine() -> None:
    asked: list[str] = []

    def present(image: str) -> bool:
        asked.append(image)
        return True

    assert ryuk_choice({}, {}, "testcontainers/ryuk:0.8.1", present) == RyukChoice(enabled=True)
    assert asked == ["testcontainers/ryuk:0.8.1"]


def test_ryuk_is_switched_off_with_one_line_when_its_image_is_missing() -> None:
    choice = ryuk_choice({}, {}, "testcontainers/ryuk:0.8.1", _never_present)
    assert not choice.enabled
    assert choice.notice.startswith("testcontainers: Ryuk off (testcontainers/ryuk:0.8.1 is not in the local Docker "
                                    "engine")
    assert "\n" not in choice.notice and "docker pull testcontainers/ryuk:0.8.1" in choice.notice


@pytest.mark.parametrize("env, props, enabled", [
    ({"TESTCONTAINERS_RYUK_DISABLED": "false"}, {}, True),  # testcontainers then pulls it, as it does by default
    ({"TESTCONTAINERS_RYUK_DISABLED": "true"}, {}, False),
    ({"TESTCONTAINERS_RYUK_DISABLED": "TRUE"}, {"ryuk.disabled": "false"}, False),  # the variable first
    ({}, {"ryuk.disabled": "false"}, True),
    ({}, {"ryuk.disabled": "true"}, False),
])
def test_an_explicit_ryuk_setting_is_followed_silently(env: dict[str, str], props: dict[str, str],
                                                       enabled: bool) -> None:
    assert ryuk_choice(env, props, "testcontainers/ryuk:0.8.1", _never_present) == RyukChoice(enabled=enabled)


def test_containers_carry_the_run_labels() -> None:
    pytest.importorskip("testcontainers")
    from testcontainers.core.network import Network

    offline = {"version": "1.41"}
    ns_spec, _ = rocketmq_specs()
    labels = {SUITE_LABEL: "run1", "airflow-provider-rocketmq.pid": "42"}
    c = containers.build_container(ns_spec, Network(docker_client_kw=offline), offline, labels=labels)
    assert c._kwargs == {"labels": labels}  # testcontainers adds its own labels to these at creation


def _fake_engine(reply: bytes) -> tuple[str, threading.Thread]:
    """A one-shot TCP server on 127.0.0.1 answering the probe with ``reply``."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def serve() -> None:
        with srv:
            conn, _ = srv.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(reply)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return f"tcp://127.0.0.1:{port}", t


def test_docker_probe_accepts_an_engine_answering_ping() -> None:
    endpoint, t = _fake_engine(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")
    assert docker_engine_answers(endpoint)
    t.join(5)


def test_docker_probe_rejects_a_non_docker_answer() -> None:
    endpoint, t = _fake_engine(b"HTTP/1.1 404 Not Found\r\n\r\n")
    assert not docker_engine_answers(endpoint)
    t.join(5)


def test_docker_probe_is_false_for_a_missing_socket(tmp_path) -> None:
    assert not docker_engine_answers(f"unix://{tmp_path}/docker.sock")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    srv.close()  # nothing listens there any more
    assert not docker_engine_answers(f"tcp://127.0.0.1:{port}", timeout=0.5)
