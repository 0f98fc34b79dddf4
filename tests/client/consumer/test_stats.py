"""The running-info figures' windows (a fake clock; the sampler runs every 10 s in a consumer)."""

from __future__ import annotations

from airflow_provider_rocketmq.client.consumer.stats import ConsumeStatsTable


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_minute_rates_hour_totals_and_the_rt_fallback() -> None:
    clock = Clock()
    table = ConsumeStatsTable(clock)
    st = table.topic("T")
    # first 30 s: 300 pulled in 10 pulls of 20 ms, 290 ok + 10 failed in 30 calls of 5 ms
    st.pulls, st.pull_rt, st.pulled = 10, 0.2, 300
    st.consumed_ok, st.consumed_failed, st.consume_calls, st.consume_rt = 290, 10, 30, 0.15
    clock.t += 30
    assert table.status("T") == {"pullRT": 20.0, "pullTPS": 10.0, "consumeRT": 5.0, "consumeOKTPS": 9.667,
                                 "consumeFailedTPS": 0.333, "consumeFailedMsgs": 10}  # 3 decimals
    for _ in range(12):  # two idle minutes, sampled every 10 s
        table.sample()
        clock.t += 10
    idle = table.status("T")
    assert (idle["pullTPS"], idle["consumeOKTPS"], idle["pullRT"]) == (0.0, 0.0, 0.0)  # the minute is empty
    assert idle["consumeRT"] == 5.0 and idle["consumeFailedMsgs"] == 10  # the hour still holds them
    for _ in range(360):  # an hour later the failures have left the window too
        table.sample()
        clock.t += 10
    assert table.status("T")["consumeFailedMsgs"] == 0
    assert table.status("unknown") == {"pullRT": 0.0, "pullTPS": 0.0, "consumeRT": 0.0, "consumeOKTPS": 0.0,
                                       "consumeFailedTPS": 0.0, "consumeFailedMsgs": 0}
