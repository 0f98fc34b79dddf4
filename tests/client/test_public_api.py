"""The client package's public names: what the Airflow layer and users import from `airflow_provider_rocketmq.client`."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import airflow_provider_rocketmq.client as client
from airflow_provider_rocketmq.client.protocol import errors


def test_every_public_name_resolves_to_the_object_of_its_module() -> None:
    exports = client._EXPORTS
    assert sorted(client.__all__) == sorted(exports)
    for name, module in exports.items():
        assert getattr(client, name) is getattr(importlib.import_module(module, client.__name__), name), name


def test_type_checkers_see_the_same_names_as_the_lazy_lookup() -> None:
    tree = ast.parse(Path(client.__file__).read_text("utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    eager = {alias.name: "." * node.level + (node.module or "")
             for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert eager == client._EXPORTS


def test_every_error_class_a_caller_may_catch_is_public() -> None:
    classes = {name for name, obj in vars(errors).items()
               if inspect.isclass(obj) and issubclass(obj, errors.RocketMQError) and obj.__module__ == errors.__name__}
    assert classes <= set(client.__all__)
    assert {"SendAbortedError", "ConsumerConfig", "check_topic", "parse_namesrv"} <= set(client.__all__)
