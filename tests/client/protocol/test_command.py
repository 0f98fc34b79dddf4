"""RemotingCommand header fields beyond the recorded frames."""

from __future__ import annotations

from airflow_provider_rocketmq.client.protocol.command import RemotingCommand, decode_frame


def test_ext_values_are_text_and_null_fields_are_left_out() -> None:
    """Java's makeCustomHeaderToNet writes value.toString() and skips null fields."""
    cmd = RemotingCommand.request(14, {"queueId": 3, "force": True, "topic": "T", "setZeroIfNotFound": None})
    assert cmd.ext_fields == {"queueId": "3", "force": "true", "topic": "T"}
    resp = cmd.make_response(0, {"offset": 7, "remark": None})
    assert resp.ext_fields == {"offset": "7"}


def test_a_null_ext_value_from_the_wire_reads_as_absent() -> None:
    header = b'{"code":14,"extFields":{"topic":"T","queueId":null},"flag":0,"language":"JAVA","opaque":1,"version":407}'
    frame = (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header
    cmd = decode_frame(frame)
    assert cmd.ext == {"topic": "T"}
    assert cmd.ext_int("queueId", 0) == 0
