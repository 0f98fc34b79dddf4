"""`BrokerSettings`: the knobs of one embedded broker, its delay levels, and `GroupConfigs`: its
subscription-group configs."""

from __future__ import annotations

from dataclasses import dataclass

from .acl import AclConfig
from .acl2 import Acl2Config

# MessageStoreConfig.messageDelayLevel: "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
# (multiplied by BrokerSettings.time_scale)
DELAY_LEVELS_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
MAX_DELAY_LEVEL = len(DELAY_LEVELS_S)


@dataclass
class BrokerSettings:
    """Knobs of one embedded broker (names follow BrokerConfig where one exists)."""

    name: str = "broker-a"
    cluster: str = "DefaultCluster"
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port, kept across restart()
    queues: int = 8  # read/write queues of auto-created topics
    data_dir: str | None = None
    fsync: bool = False
    time_scale: float = 1.0  # multiplies the delay levels (retry back-off)
    lock_expiry: float = 60.0
    channel_expiry: float = 120.0
    auto_create_topic: bool = True
    auto_create_group: bool = True
    region: str = "DefaultRegion"
    max_message_size: int = 4 * 1024 * 1024
    retry_max_times: int = 16  # subscription-group default
    acl: AclConfig | None = None  # plain ACL 1.0 (aclEnable=true) when set
    acl2: Acl2Config | None = None  # ACL 2.0 (5.x authentication + authorization) when set; wins over acl


@dataclass
class GroupConfig:
    """SubscriptionGroupConfig: the parts the broker uses."""

    group: str
    retry_queues: int = 1
    retry_max_times: int = 16
    consume_enable: bool = True
    notify_ids_changed: bool = True


class GroupConfigs:
    """SubscriptionGroupManager: the broker's group configs, created on first use unless disabled."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.table: dict[str, GroupConfig] = {}

    def find(self, group: str) -> GroupConfig | None:
        """The config of ``group`` as it stands (never creates one)."""
        return self.table.get(group)

    def config(self, group: str) -> GroupConfig | None:
        """findSubscriptionGroupConfig: auto-creates one unless ``settings.auto_create_group`` is off."""
        cfg = self.table.get(group)
        if cfg is None and self.settings.auto_create_group:
            cfg = self.table[group] = GroupConfig(group, retry_max_times=self.settings.retry_max_times)
        return cfg
