"""An embedded RocketMQ-protocol name server and brokers, for tests and the demo.

Never a production broker. It reuses the client's codecs and answers like a real
Apache RocketMQ 4.9.x server (see docs/embedded.md).
"""

from __future__ import annotations

from .acl import AclAccount, AclConfig
from .acl2 import Acl2Config, AclEntry, AuthUser
from .broker import EmbeddedBroker
from .cluster import EmbeddedCluster
from .faults import OffsetFaults, parse_offset_faults
from .namesrv import EmbeddedNameServer
from .settings import BrokerSettings

__all__ = ["Acl2Config", "AclAccount", "AclConfig", "AclEntry", "AuthUser", "BrokerSettings", "EmbeddedBroker", "EmbeddedCluster", "EmbeddedNameServer",
           "OffsetFaults", "parse_offset_faults"]
