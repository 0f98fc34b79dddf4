"""Reading and writing the non-standard JSON that fastjson produces (REFERENCE 3).

fastjson writes ``Map`` keys that are not strings without quotes: numbers bare
(``{0:"addr"}``) and objects inline (``{{"brokerName":"b","queueId":0,"topic":"t"}:5}``).
`loads` accepts those: a bare-number key becomes its decimal string, an object or
array key becomes its raw JSON text (a `str`), which `parse_key` turns back into a
dict. Everything else is standard JSON. `dumps` writes the same forms back for the
bodies Java tools parse (ConsumerRunningInfo, offsets.json): keys that are `int`
are written bare, keys that have ``__fastjson_key__`` are written as inline objects.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ProtocolError

_WS = " \t\r\n"
_loads = json.JSONDecoder(strict=False).decode


def _skip_string(text: str, i: int) -> int:
    """Index just past the string literal starting at text[i] == '"'."""
    n = len(text)
    i += 1
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        i += 1
    raise ProtocolError("unterminated string in JSON body")


def _skip_balanced(text: str, i: int) -> int:
    """Index just past the object/array starting at text[i] (string-aware)."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ProtocolError("unbalanced object key in JSON body")


def normalize(text: str) -> str:
    """Rewrite fastjson's unquoted map keys as JSON strings; leave the rest untouched."""
    if "{{" not in text and ":" not in text:
        return text
    out: list[str] = []
    stack: list[str] = []
    expect_key = False
    i = 0
    start = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            expect_key = False  # a quoted key, or a string value
            continue
        if c in _WS:
            i += 1
            continue
        if expect_key:
            expect_key = False
            if c == "}":  # an empty object
                stack.pop()
                i += 1
                continue
            end, key = _quoted_key(text, i)
            out.append(text[start:i])
            out.append(key)
            start = i = end
            continue
        if c == "{":
            stack.append("{")
            expect_key = True
        elif c == "[":
            stack.append("[")
        elif c in "}]":
            if not stack:
                raise ProtocolError(f"unbalanced {c!r} at offset {i}")
            stack.pop()
        elif c == "," and stack and stack[-1] == "{":
            expect_key = True
        i += 1
    out.append(text[start:])
    return "".join(out)


def _quoted_key(text: str, i: int) -> tuple[int, str]:
    """The unquoted key starting at ``text[i]`` as a JSON string, and the index just past it: an
    object or array key becomes its raw JSON text, a number or literal its own text."""
    c = text[i]
    if c in "{[":
        end = _skip_balanced(text, i)
        return end, json.dumps(text[i:end], ensure_ascii=False)
    if c == "-" or c.isdigit() or c in "tfn":
        j = i
        n = len(text)
        while j < n and text[j] not in ":" + _WS:
            j += 1
        return j, '"' + text[i:j] + '"'
    raise ProtocolError(f"unexpected {c!r} at offset {i} where a key was expected")


def loads(data: bytes | str) -> Any:
    """Parse a body that may hold fastjson's unquoted keys. Errors are ProtocolError."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"JSON body is not UTF-8: {exc}") from None
    try:
        return _loads(text)
    except ValueError:
        pass
    except RecursionError:  # absurdly deep nesting: not a body any broker sends
        raise ProtocolError("JSON body nests too deeply") from None
    try:
        return _loads(normalize(text))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"body is not JSON (even for fastjson): {exc}") from None
    except IndexError:
        raise ProtocolError("malformed JSON body") from None


def parse_key(key: str) -> Any:
    """Turn a raw object key captured by `loads` back into its value (dict or list)."""
    try:
        return _loads(key)
    except ValueError as exc:
        raise ProtocolError(f"map key is not JSON: {key!r}: {exc}") from None


# -- writing -------------------------------------------------------------------

def _dump_key(key: Any) -> str:
    if isinstance(key, str):
        return json.dumps(key, ensure_ascii=False)
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    fk = getattr(key, "__fastjson_key__", None)
    if fk is not None:
        return dumps(fk())
    raise TypeError(f"cannot write map key of type {type(key).__name__}")


def dumps(obj: Any, *, sort_keys: bool = True) -> str:
    """Compact fastjson-style text: non-string keys unquoted, object keys inline."""
    if isinstance(obj, dict):
        items: list[tuple[Any, Any]] = list(obj.items())
        if sort_keys and all(isinstance(k, str) for k in obj):
            items.sort()
        return "{" + ",".join(_dump_key(k) + ":" + dumps(v, sort_keys=sort_keys) for k, v in items) + "}"
    if isinstance(obj, (list, tuple, set, frozenset)):
        return "[" + ",".join(dumps(v, sort_keys=sort_keys) for v in obj) + "]"
    fj = getattr(obj, "__fastjson__", None)
    if fj is not None:
        return dumps(fj(), sort_keys=sort_keys)
    return json.dumps(obj, ensure_ascii=False)


def dumps_pretty(obj: Any, indent: int = 0) -> str:
    """fastjson's PrettyFormat layout (tabs), as Java writes offsets.json."""
    tab = "\t"
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = sorted(obj.items()) if all(isinstance(k, str) for k in obj) else list(obj.items())
        lines = []
        for k, v in items:
            fk = getattr(k, "__fastjson_key__", None)
            key = dumps_pretty(fk(), indent + 1) if fk is not None else _dump_key(k)
            lines.append(tab * (indent + 1) + key + ":" + dumps_pretty(v, indent + 1))
        return "{\n" + ",\n".join(lines) + "\n" + tab * indent + "}"
    if isinstance(obj, (list, tuple)):
        if not obj:
            return "[]"
        return "[\n" + ",\n".join(tab * (indent + 1) + dumps_pretty(v, indent + 1) for v in obj) + \
            "\n" + tab * indent + "]"
    fj = getattr(obj, "__fastjson__", None)
    if fj is not None:
        return dumps_pretty(fj(), indent)
    return json.dumps(obj, ensure_ascii=False)
