"""What the client commands share: the client config from ``--namesrv`` and the environment, output
(``--json`` or text) and integer checks.

ACL credentials come from the environment through `env_client_options`, like in every command
(never from the command line, where ``ps`` shows them).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..client.config import ClientConfig, env_client_options
from ..client.protocol.errors import ConfigError


def client_config(args: argparse.Namespace) -> ClientConfig:
    """ClientConfig from ``--namesrv`` and the environment (`env_client_options`)."""
    return ClientConfig(**env_client_options(args.namesrv)).validate()


def emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    """``data`` as one JSON line with ``--json``, else ``text``."""
    print(json.dumps(data, ensure_ascii=False) if args.json else text)


def positive(name: str, value: int, minimum: int = 1) -> int:
    """``value``, or a ConfigError naming the option ``name`` when it is below ``minimum``."""
    if value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")
    return value
