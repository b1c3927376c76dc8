"""Names as the Kubernetes API's grammar takes them: RFC 1123 labels and subdomains, and
label keys, values, maps and selectors."""

from __future__ import annotations

from hypothesis import strategies as st

from .._selector import LabelSelector, Requirement, SelectorOperator

_LOWER = "abcdefghijklmnopqrstuvwxyz"
_DIGITS = "0123456789"
_LABEL_CHARS = _LOWER + _DIGITS + "-"


# -- names ---------------------------------------------------------------------------------------


def dns_labels(*, max_size: int = 63) -> st.SearchStrategy[str]:
    """RFC 1123 labels as the seed's ``DNS_LABEL``: lowercase alphanumerics and ``-``, starting
    and ending alphanumeric, 1..``max_size`` characters (``max_size`` ≤ 63)."""
    alnum = st.sampled_from(_LOWER + _DIGITS)
    middle = st.text(alphabet=_LABEL_CHARS, max_size=max(0, max_size - 2))
    single = alnum
    longer = st.tuples(alnum, middle, alnum).map("".join)
    return (single | longer) if max_size >= 2 else single


def dns_subdomains(*, max_size: int = 253) -> st.SearchStrategy[str]:
    """RFC 1123 subdomains as the seed's ``DNS_SUBDOMAIN``: dot-separated labels, 1..``max_size``
    characters in total (labels of up to 63 characters)."""
    return (
        st.lists(dns_labels(max_size=63), min_size=1, max_size=5)
        .map(".".join)
        .filter(lambda name: len(name) <= max_size)
    )


# -- label selectors -------------------------------------------------------------------------------


_NAME_CHARS = _LOWER + _LOWER.upper() + _DIGITS


def _label_names() -> st.SearchStrategy[str]:
    alnum = st.sampled_from(_NAME_CHARS)
    middle = st.text(alphabet=_NAME_CHARS + "-_.", max_size=10)
    return alnum | st.tuples(alnum, middle, alnum).map("".join)


def label_keys() -> st.SearchStrategy[str]:
    """Valid label keys: a name (alphanumerics, ``-_.``, ≤ 63) with an optional DNS prefix."""
    prefix = st.none() | dns_subdomains(max_size=40)
    return st.tuples(prefix, _label_names()).map(lambda p: f"{p[0]}/{p[1]}" if p[0] else p[1])


def label_values() -> st.SearchStrategy[str]:
    """Valid label values, the empty string included."""
    return st.just("") | _label_names()


def label_maps(*, max_size: int = 6) -> st.SearchStrategy[dict[str, str]]:
    """Label maps (key → value) as on an object's ``metadata.labels``."""
    return st.dictionaries(label_keys(), label_values(), max_size=max_size)


@st.composite
def _requirements(draw: st.DrawFn) -> Requirement:
    key = draw(label_keys())
    operator = draw(st.sampled_from(SelectorOperator))
    match operator:
        case SelectorOperator.EQUALS | SelectorOperator.NOT_EQUALS:
            values = frozenset([draw(label_values())])
        case SelectorOperator.IN | SelectorOperator.NOT_IN:
            values = frozenset(draw(st.lists(label_values(), min_size=1, max_size=4)))
        case SelectorOperator.EXISTS | SelectorOperator.DOES_NOT_EXIST:
            values = frozenset()
    return Requirement(key, operator, values)


def label_selectors(*, max_size: int = 5) -> st.SearchStrategy[LabelSelector]:
    """Selectors of up to ``max_size`` requirements, every operator (=, !=, in, notin, exists,
    !exists), the empty selector included."""
    return st.lists(_requirements(), max_size=max_size).map(lambda r: LabelSelector(tuple(r)))
