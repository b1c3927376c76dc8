"""Label selectors: a Deployment's ``spec.selector``, its ``labelSelector`` query, and a matcher.

``LabelSelector.from_spec`` reads ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists,
DoesNotExist); ``to_query`` renders the string the API server's ``labelSelector`` parameter takes
(requirements sorted by key, as apimachinery renders them); ``parse`` reads such a string back
(equality ``=``/``==``/``!=`` and set-based ``in``/``notin``/``key``/``!key``), and ``matches``
evaluates either form against a label map. Keys and values are checked against the label syntax
so nothing from a Deployment can inject extra terms into a query.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping

import attrs

from ._errors import ExecError, ExecErrorCode

__all__ = ["LabelSelector", "Requirement", "SelectorOperator"]

_NAME = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
_PREFIX = r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*)"
_KEY = re.compile(rf"(?:{_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"{_NAME}?")


class SelectorOperator(enum.Enum):
    """A requirement's operator; ``EQUALS``/``NOT_EQUALS`` are the one-value set forms."""

    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


_SET_OPERATORS = {"In": SelectorOperator.IN, "NotIn": SelectorOperator.NOT_IN}
_EXISTENCE_OPERATORS = {
    "Exists": SelectorOperator.EXISTS,
    "DoesNotExist": SelectorOperator.DOES_NOT_EXIST,
}


def _malformed(detail: str) -> ExecError:
    return ExecError(ExecErrorCode.INVALID, f"Invalid label selector: {detail}")


def _check_key(key: object) -> str:
    if not isinstance(key, str) or len(key) > 317 or _KEY.fullmatch(key) is None:
        raise _malformed(f"{key!r} is not a valid label key")
    if "/" in key and len(key.split("/", 1)[0]) > 253:
        raise _malformed(f"{key!r} has a prefix longer than 253 characters")
    return key


def _check_value(value: object) -> str:
    if not isinstance(value, str) or len(value) > 63 or _VALUE.fullmatch(value) is None:
        raise _malformed(f"{value!r} is not a valid label value")
    return value


@attrs.frozen
class Requirement:
    """One term of a selector."""

    key: str
    operator: SelectorOperator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this term (absent keys satisfy ``!=`` and ``notin``)."""
        present = self.key in labels
        match self.operator:
            case SelectorOperator.EQUALS | SelectorOperator.IN:
                return present and labels[self.key] in self.values
            case SelectorOperator.NOT_EQUALS | SelectorOperator.NOT_IN:
                return not present or labels[self.key] not in self.values
            case SelectorOperator.EXISTS:
                return present
            case SelectorOperator.DOES_NOT_EXIST:
                return not present

    def to_query(self) -> str:
        """This term as apimachinery renders it."""
        match self.operator:
            case SelectorOperator.EQUALS | SelectorOperator.NOT_EQUALS:
                (value,) = self.values
                return f"{self.key}{self.operator.value}{value}"
            case SelectorOperator.IN | SelectorOperator.NOT_IN:
                return f"{self.key} {self.operator.value} ({','.join(sorted(self.values))})"
            case SelectorOperator.EXISTS:
                return self.key
            case SelectorOperator.DOES_NOT_EXIST:
                return f"!{self.key}"


def _requirement(key: object, operator: SelectorOperator, values: list[object]) -> Requirement:
    checked = frozenset(_check_value(value) for value in values)
    if operator in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not checked:
        raise _malformed(f"{operator.value} on {key!r} needs at least one value")
    if operator in (SelectorOperator.EQUALS, SelectorOperator.NOT_EQUALS) and len(checked) != 1:
        raise _malformed(f"{operator.value} on {key!r} needs exactly one value")
    if operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and checked:
        raise _malformed(f"{key!r} takes no values with that operator")
    return Requirement(_check_key(key), operator, checked)


_TERM = re.compile(
    r"\s*(?:"
    r"!\s*(?P<absent>[^\s,=!()]+)"
    r"|(?P<setkey>[^\s,=!()]+)\s+(?P<setop>in|notin)\s*\((?P<values>[^()]*)\)"
    r"|(?P<eqkey>[^\s,=!()]+)\s*(?P<eqop>==|=|!=)\s*(?P<value>[^\s,=!()]*)"
    r"|(?P<key>[^\s,=!()]+)"
    r")\s*(?:,|$)"
)


@attrs.frozen
class LabelSelector:
    """A conjunction of requirements, kept sorted by key then operator (canonical form)."""

    requirements: tuple[Requirement, ...] = ()

    def __attrs_post_init__(self) -> None:
        ordered = tuple(
            sorted(self.requirements, key=lambda r: (r.key, r.operator.value, sorted(r.values)))
        )
        object.__setattr__(self, "requirements", ordered)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> LabelSelector:
        """An equality selector (``matchLabels`` only)."""
        return cls(tuple(_requirement(k, SelectorOperator.EQUALS, [v]) for k, v in labels.items()))

    @classmethod
    def from_spec(cls, spec: object) -> LabelSelector:
        """Read a ``metav1.LabelSelector`` object (``None`` is the empty selector).

        Raises:
            ExecError: ``EXEC_INVALID`` when the object, a key, a value or an operator is malformed.
        """
        if spec is None:
            return cls()
        if not isinstance(spec, dict):
            raise _malformed("the selector is not an object")
        requirements: list[Requirement] = []
        match_labels = spec.get("matchLabels") or {}
        if not isinstance(match_labels, dict):
            raise _malformed("matchLabels is not an object")
        for key, value in match_labels.items():
            requirements.append(_requirement(key, SelectorOperator.EQUALS, [value]))
        expressions = spec.get("matchExpressions") or []
        if not isinstance(expressions, list):
            raise _malformed("matchExpressions is not a list")
        for expression in expressions:
            if not isinstance(expression, dict):
                raise _malformed("a matchExpressions entry is not an object")
            name = expression.get("operator")
            values = expression.get("values") or []
            if not isinstance(values, list):
                raise _malformed("matchExpressions values is not a list")
            # isinstance first: a JSON list or object as the operator is unhashable.
            if isinstance(name, str) and name in _SET_OPERATORS:
                operator = _SET_OPERATORS[name]
            elif isinstance(name, str) and name in _EXISTENCE_OPERATORS:
                operator = _EXISTENCE_OPERATORS[name]
            else:
                raise _malformed(f"unknown operator {name!r}")
            requirements.append(_requirement(expression.get("key"), operator, values))
        return cls(tuple(requirements))

    @classmethod
    def parse(cls, query: str) -> LabelSelector:
        """Read a ``labelSelector`` query string; the empty string selects everything.

        Raises:
            ExecError: ``EXEC_INVALID`` for anything apimachinery's parser would reject here.
        """
        requirements: list[Requirement] = []
        position = 0
        text = query.strip()
        while position < len(text):
            match = _TERM.match(text, position)
            if match is None or match.end() == position:
                raise _malformed(f"cannot parse {text[position:]!r}")
            groups = match.groupdict()
            if groups["absent"] is not None:
                requirements.append(
                    _requirement(groups["absent"], SelectorOperator.DOES_NOT_EXIST, [])
                )
            elif groups["setkey"] is not None:
                values: list[object] = [v.strip() for v in groups["values"].split(",")]
                operator = SelectorOperator(groups["setop"])
                requirements.append(_requirement(groups["setkey"], operator, values))
            elif groups["eqkey"] is not None:
                operator = (
                    SelectorOperator.NOT_EQUALS
                    if groups["eqop"] == "!="
                    else SelectorOperator.EQUALS
                )
                requirements.append(_requirement(groups["eqkey"], operator, [groups["value"]]))
            else:
                requirements.append(_requirement(groups["key"], SelectorOperator.EXISTS, []))
            position = match.end()
            if text[match.end() - 1 : match.end()] == "," and position >= len(text):
                raise _malformed("a trailing comma")
        return cls(tuple(requirements))

    @property
    def is_empty(self) -> bool:
        """An empty selector selects everything; the seed refuses to use one."""
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether every requirement holds for ``labels``."""
        return all(requirement.matches(labels) for requirement in self.requirements)

    def to_query(self) -> str:
        """The ``labelSelector`` query value (not URL-encoded)."""
        return ",".join(requirement.to_query() for requirement in self.requirements)
