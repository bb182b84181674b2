"""Reading a YAML file strictly: a key given twice is refused (PyYAML keeps the last one
silently), and every way of failing is a one-line ConfigError naming the file and the line."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, first_line


class _DuplicateKey(yaml.YAMLError):
    """A key given twice in one YAML mapping, at `line` (from 1)."""

    def __init__(self, key: Any, line: int):
        super().__init__(f"key {key!r} is given twice in one mapping")
        self.key, self.line = key, line


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping: PyYAML keeps the last silently."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *base' may override keys
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader reports an unhashable key itself
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> Any:
    """The YAML document in `path`; every way of failing is a one-line ConfigError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {exc.object[exc.start]:#04x})") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as exc:
        raise ConfigError(f"{path}:{exc.line}: {exc}; delete one of them") from None
    except yaml.YAMLError as exc:
        mark, where = getattr(exc, "problem_mark", None), ""
        if mark is not None:
            where = f":{mark.line + 1}"
        elif getattr(exc, "position", None) is not None:  # a ReaderError: a character YAML refuses
            line = text.count("\n", 0, exc.position) + 1
            where = f":{line}"
        reason = getattr(exc, "problem", None) or first_line(exc)
        raise ConfigError(f"{path}{where}: not valid YAML ({reason})") from None
    except RecursionError:  # thousands of nested brackets
        raise ConfigError(f"{path}: not valid YAML (nested too deeply)") from None
    except ValueError as exc:  # an integer of over 4,300 digits
        raise ConfigError(f"{path}: not valid YAML ({str(exc)[:100]})") from None
