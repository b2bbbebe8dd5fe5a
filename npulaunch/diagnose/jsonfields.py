"""Read a decoded JSON document (summary.json, failure.json) field by field: each accessor checks
the field's type and every complaint names the file and the field's path
(``summary.json: ranks[1].state: found str 'runing'; expected one of ...``). Pure.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Dict, List, NoReturn, Optional, Tuple, Type, TypeVar

from npulaunch.host.errors import NpulaunchError

E = TypeVar("E", bound=Enum)


class SummaryError(NpulaunchError):
    """summary.json or failure.json is not what npulaunch writes (edited, truncated, another tool's)."""

    exit_code = 2


_MISSING = object()


class Fields:
    """One JSON object of a summary, read field by field; every complaint names the file and the
    field's path (``summary.json: ranks[1].state: found str 'runing'; expected one of ...``)."""

    def __init__(self, data: Any, source: str, where: str) -> None:
        self.source, self.where = source, where
        if not isinstance(data, dict):
            self._fail(where, data, "an object")
        self.data: Dict[str, Any] = data

    def _fail(self, where: str, found: Any, expected: str) -> NoReturn:
        shown = "nothing" if found is _MISSING else f"{type(found).__name__} {found!r}"[:80]
        raise SummaryError(
            f"{self.source}: {where or 'the top level'}: found {shown}; expected {expected} "
            "(not a summary npulaunch wrote: edited or truncated?)"
        )

    def has(self, key: str) -> bool:
        """Whether the object holds the key (a field a later version added)."""
        return key in self.data

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def value(self, key: str, kinds: Tuple[type, ...], expected: str, optional: bool = False) -> Any:
        found = self.data.get(key, _MISSING)
        if optional and found is None:
            return None
        if found is _MISSING or isinstance(found, bool) is not (bool in kinds) or not isinstance(found, kinds):
            self._fail(self._path(key), found, expected + (" or null" if optional else ""))
        return found

    def text(self, key: str) -> str:
        return str(self.value(key, (str,), "a string"))

    def opt_text(self, key: str) -> Optional[str]:
        return self.value(key, (str,), "a string", optional=True)

    def integer(self, key: str) -> int:
        return int(self.value(key, (int,), "an integer"))

    def opt_int(self, key: str) -> Optional[int]:
        return self.value(key, (int,), "an integer", optional=True)

    def number(self, key: str) -> float:
        found: float = self.value(key, (int, float), "a number")  # an int stays one: written back as it was read
        return found

    def opt_number(self, key: str) -> Optional[float]:
        return self.value(key, (int, float), "a number", optional=True)

    def flag(self, key: str) -> bool:
        return bool(self.value(key, (bool,), "true or false"))

    def choice(self, key: str, kind: Type[E]) -> E:
        text = self.data.get(key, _MISSING)
        allowed = [str(member.value) for member in kind]
        if text not in allowed:
            self._fail(self._path(key), text, "one of " + ", ".join(allowed))
        return kind(text)

    def items(self, key: str, kind: type, expected: str) -> Tuple[Any, ...]:
        found = self.value(key, (list,), f"a list of {expected}")
        for index, item in enumerate(found):
            if isinstance(item, bool) is not (kind is bool) or not isinstance(item, kind):
                self._fail(f"{self._path(key)}[{index}]", item, expected)
        return tuple(found)

    def texts(self, key: str) -> Tuple[str, ...]:
        return self.items(key, str, "strings")

    def ints(self, key: str) -> Tuple[int, ...]:
        return self.items(key, int, "integers")

    def objects(self, key: str) -> List["Fields"]:
        found = self.value(key, (list,), "a list of objects")
        return [Fields(item, self.source, f"{self._path(key)}[{index}]") for index, item in enumerate(found)]

    def object(self, key: str) -> "Fields":
        return Fields(self.value(key, (dict,), "an object"), self.source, self._path(key))

    def opt_object(self, key: str) -> Optional["Fields"]:
        found = self.value(key, (dict,), "an object", optional=True)
        return None if found is None else Fields(found, self.source, self._path(key))
