"""User callables named in task parameters: a callable, or the dotted path of one, resolved where it runs.

The produce operator's ``producer_function`` and the await-message trigger's ``apply_function``
(a dotted path the triggerer imports) go through `resolve_callable`: a bad value is a `ConfigError`
naming the parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

from airflow_provider_rocketmq.client import ConfigError


def resolve_callable(field: str, fn: Callable[..., Any] | str) -> Callable[..., Any]:
    """A callable, or the dotted path of one (``"my_pkg.my_module.my_function"``)."""
    if callable(fn):
        return fn
    if not isinstance(fn, str) or "." not in fn:
        raise ConfigError(field, f"expected a callable or a dotted path 'module.function', got {fn!r}")
    module, _, name = fn.rpartition(".")
    try:
        found = getattr(import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(field, f"cannot import {fn!r}: {exc}") from None
    if not callable(found):
        raise ConfigError(field, f"{fn!r} is not callable")
    return found  # type: ignore[no-any-return]  # getattr of an imported module: checked callable above
