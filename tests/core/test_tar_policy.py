"""The extraction policy, rule by rule, and the property that matters: whatever the archive and
however it is chunked, an extractor that does what the policy allows (even one that follows every
symlink) writes nothing outside the destination, and no symlink it leaves leads out."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.tar import (
    Extraction,
    ExtractionPolicy,
    Skipped,
    SymlinkRule,
    TarError,
    TarKind,
    TarLimits,
    TarMember,
)

from .tar_support import (
    Escape,
    Inconsistent,
    ModelFS,
    Spec,
    cuts_strategy,
    hostile_members,
    member,
    read_archive,
    tarfile_archive,
)

FILE, DIR, LINK, HARD = TarKind.FILE, TarKind.DIRECTORY, TarKind.SYMLINK, TarKind.HARDLINK


def decide_all(
    policy: ExtractionPolicy, items: list[tuple[TarKind, str, str]]
) -> list[Extraction | Skipped]:
    return [
        policy.decide(member(name, kind, linkname=link, index=index))
        for index, (kind, name, link) in enumerate(items)
    ]


def refused(policy: ExtractionPolicy, item: TarMember, message: str) -> TarError:
    with pytest.raises(TarError) as caught:
        policy.decide(item)
    assert caught.value.code is ExecErrorCode.FAILED
    assert re.search(message, caught.value.message), caught.value.message
    assert caught.value.member == item.name
    return caught.value


# -- what is allowed -------------------------------------------------------------------------


def test_files_and_directories_get_normalised_paths_and_their_new_parents() -> None:
    policy = ExtractionPolicy()
    first, second, third, again = decide_all(
        policy, [(FILE, "./a/b//c", ""), (FILE, "a/b/d", ""), (DIR, "a/e/", ""), (DIR, "a/e", "")]
    )
    assert first == Extraction(member=first.member, kind=FILE, path="a/b/c",
                               new_parents=("a", "a/b"), mode=0o644)  # fmt: skip
    assert isinstance(second, Extraction)
    assert (second.path, second.new_parents) == ("a/b/d", ())
    assert isinstance(third, Extraction)
    assert (third.path, third.new_parents, third.mode) == ("a/e", (), 0o644)
    assert isinstance(again, Extraction)  # a directory may repeat
    assert policy.members == 4


def test_the_destination_itself_is_skipped_as_a_directory_and_refused_as_anything_else() -> None:
    policy = ExtractionPolicy()
    assert isinstance(policy.decide(member("./", DIR)), Skipped)
    assert isinstance(policy.decide(member(".", DIR)), Skipped)
    refused(policy, member(".", FILE), "a file cannot be the destination directory itself")
    refused(policy, member("", LINK, linkname="x"), "a symlink cannot be the destination")


@pytest.mark.parametrize(("mode", "kept"), [(0o4755, 0o755), (0o2755, 0o755), (0o1777, 0o777),
                                            (0o7777, 0o777), (0o600, 0o600)])  # fmt: skip
def test_setuid_setgid_and_sticky_bits_are_stripped(mode: int, kept: int) -> None:
    policy = ExtractionPolicy()
    file = policy.decide(member("f", FILE, mode=mode))
    directory = policy.decide(member("d", DIR, mode=mode))
    assert isinstance(file, Extraction)
    assert isinstance(directory, Extraction)
    assert file.mode == directory.mode == kept


def test_backslashes_are_ordinary_characters_on_posix() -> None:
    decision = ExtractionPolicy().decide(member("a\\..\\..\\b"))
    assert isinstance(decision, Extraction)
    assert (decision.path, decision.new_parents) == ("a\\..\\..\\b", ())


def test_strip_components() -> None:
    policy = ExtractionPolicy(strip_components=1)
    top, file, short, link = decide_all(
        policy,
        [(DIR, "top/", ""), (FILE, "top/a/f", ""), (FILE, "f", ""), (HARD, "top/h", "top/a/f")],
    )
    assert isinstance(top, Skipped)
    assert top.reason == "no name left after strip_components"
    assert isinstance(file, Extraction)
    assert (file.path, file.new_parents) == ("a/f", ("a",))
    assert isinstance(short, Skipped)
    assert isinstance(link, Extraction)
    assert (link.path, link.link_target) == ("h", "a/f")


# -- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("/etc/passwd", "the name is an absolute path"),
        ("//server/share", "absolute path"),
        ("..", "'..' component \\(CVE-2018-1002100\\)"),
        ("../evil", "'..' component"),
        ("a/../../evil", "'..' component"),
        ("a/b/..", "'..' component"),
        ("a\0b", "the name holds a NUL byte"),
        ("x" * 256, "a component of the name is longer than 255 bytes"),
        ("/".join(["y" * 200] * 21), "the name is longer than 4096 bytes"),
        ("é" * 128, "longer than 255 bytes"),  # 256 bytes of UTF-8
    ],
)
def test_bad_names_are_refused(name: str, message: str) -> None:
    refused(ExtractionPolicy(), member(name), message)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (TarKind.CHAR_DEVICE, "device nodes are never extracted"),
        (TarKind.BLOCK_DEVICE, "device nodes are never extracted"),
        (TarKind.FIFO, "FIFOs are never extracted"),
        (TarKind.SPARSE, "sparse files are not supported"),
        (TarKind.OTHER, "members of type 'Z' are not supported"),
    ],
)
def test_only_files_directories_and_links_are_extracted(kind: TarKind, message: str) -> None:
    refused(ExtractionPolicy(), member("node", kind), message)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a\\..\\..\\evil", "'..' component"),
        ("C:\\Windows\\evil", "absolute path \\(a drive letter\\)"),
        ("c:evil", "a drive letter"),
        ("\\evil", "absolute path"),
        ("dir/file:stream", "a character Windows reserves"),
        ("what?", "a character Windows reserves"),
        ("tab\there", "a character Windows reserves"),
        ("trailing.", "ends with a dot or space"),
        ("trailing ", "ends with a dot or space"),
        ("CON", "a Windows device name"),
        ("nul.txt", "a Windows device name"),
        ("sub/Com1.log", "a Windows device name"),
    ],
)
def test_windows_names(name: str, message: str) -> None:
    refused(ExtractionPolicy(windows=True), member(name), message)
    if "'..'" not in message and not name.startswith(("\\", "C:", "c:")):
        assert isinstance(ExtractionPolicy().decide(member(name)), Extraction)  # fine on POSIX


# -- the view: parents and duplicates --------------------------------------------------------


def test_nothing_is_written_through_a_symlink_cve_2019_1002101() -> None:
    policy = ExtractionPolicy()
    decide_all(policy, [(LINK, "l", "."), (LINK, "d/l2", "..")])
    refused(policy, member("l/evil"), "its parent 'l' is a symlink: nothing is written through")
    refused(policy, member("l/deeper/evil", DIR), "its parent 'l' is a symlink")
    refused(policy, member("d/l2/x", LINK, linkname="y"), "its parent 'd/l2' is a symlink")
    refused(policy, member("l/h", HARD, linkname="x"), "its parent 'l' is a symlink")


def test_nothing_is_written_through_a_skipped_symlink() -> None:
    for rule in (SymlinkRule.SKIP_ALL, SymlinkRule.SKIP_ESCAPING):
        policy = ExtractionPolicy(symlink_rule=rule)
        skipped = policy.decide(member("l", LINK, linkname="/etc"))
        assert isinstance(skipped, Skipped)
        refused(policy, member("l/passwd"), "its parent 'l' is a symlink that was not extracted")
        refused(policy, member("l", FILE), "'l' was already extracted \\(as a symlink that was not")


def test_a_file_is_not_a_directory() -> None:
    policy = ExtractionPolicy()
    policy.decide(member("f"))
    refused(policy, member("f/x"), "its parent 'f' is a file, not a directory")


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ((FILE, "a"), (FILE, "a"), "'a' was already extracted \\(as a file\\)"),
        ((FILE, "a"), (DIR, "a"), "as a file"),
        ((DIR, "a"), (FILE, "a"), "as a directory"),
        ((FILE, "a/b"), (FILE, "a"), "as a directory"),  # an implicit parent
        ((LINK, "a"), (FILE, "./a"), "as a symlink"),
        ((DIR, "a"), (LINK, "a/"), "as a directory"),
    ],
)
def test_a_path_is_extracted_once(
    first: tuple[TarKind, str], second: tuple[TarKind, str], message: str
) -> None:
    policy = ExtractionPolicy()
    policy.decide(member(first[1], first[0], linkname="x"))
    refused(policy, member(second[1], second[0], linkname="x"), message)


# -- symlinks --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("l", "."),
        ("l", "x"),
        ("l", "./x/y/"),
        ("a/l", ".."),
        ("a/l", "../b"),
        ("a/b/c/l", "../../../x"),
        ("a/l", "../x/./y"),
    ],
)
def test_symlinks_that_stay_inside_are_extracted(path: str, target: str) -> None:
    decision = ExtractionPolicy().decide(member(path, LINK, linkname=target))
    assert isinstance(decision, Extraction)
    assert (decision.kind, decision.link_target, decision.mode) == (LINK, target, 0)


@pytest.mark.parametrize(
    ("path", "target", "message"),
    [
        ("l", "/etc", "the target is absolute"),
        ("l", "..", "points outside the destination"),
        ("a/l", "../..", "points outside"),
        ("a/b/l", "../../../x", "points outside"),
        (
            "l",
            "x/../y",
            "climbs back out of a directory it named .* \\(CVE-2019-11249, CVE-2019-11251\\)",
        ),
        ("a/b/l", "x/../..", "climbs back out"),
        ("l", "", "an empty target"),
        ("l", "x\0y", "the target holds a NUL byte"),
    ],
)
def test_symlinks_that_could_lead_out_are_refused(path: str, target: str, message: str) -> None:
    refused(
        ExtractionPolicy(), member(path, LINK, linkname=target), f"a symlink to .*: .*{message}"
    )
    skipped = ExtractionPolicy(symlink_rule=SymlinkRule.SKIP_ESCAPING).decide(
        member(path, LINK, linkname=target)
    )
    assert isinstance(skipped, Skipped)
    assert re.search(message, skipped.reason)


def test_kubectl_rule_extracts_no_symlink() -> None:
    policy = ExtractionPolicy(symlink_rule=SymlinkRule.SKIP_ALL)
    inside, outside = decide_all(policy, [(LINK, "in", "x"), (LINK, "out", "/etc")])
    assert isinstance(inside, Skipped)
    assert inside.reason == "symlink to 'x': symlinks are not extracted"
    assert isinstance(outside, Skipped)


def test_skip_escaping_extracts_the_symlinks_that_stay_inside() -> None:
    policy = ExtractionPolicy(symlink_rule=SymlinkRule.SKIP_ESCAPING)
    inside, outside = decide_all(policy, [(LINK, "in", "x"), (LINK, "venv/python", "/usr/bin/py")])
    assert isinstance(inside, Extraction)
    assert isinstance(outside, Skipped)
    assert outside.reason == "symlink to '/usr/bin/py': the target is absolute"


def test_windows_symlink_targets() -> None:
    policy = ExtractionPolicy(windows=True)
    refused(policy, member("l", LINK, linkname="..\\..\\x"), "points outside")
    refused(policy, member("m", LINK, linkname="C:\\x"), "absolute \\(a drive letter\\)")
    decision = policy.decide(member("a\\n", LINK, linkname="..\\x"))
    assert isinstance(decision, Extraction)
    assert (decision.path, decision.link_target, decision.new_parents) == ("a/n", "../x", ("a",))


def test_case_insensitive_destinations_fold_names() -> None:
    policy = ExtractionPolicy(case_insensitive=True)
    decide_all(policy, [(LINK, "Link", "."), (FILE, "Straße", "")])
    refused(policy, member("LINK/evil"), "its parent 'LINK' is a symlink")
    refused(policy, member("STRASSE"), "already extracted")
    refused(policy, member("stras\u0073e"), "already extracted")
    # A decomposed é is the same name as a composed one on macOS.
    policy.decide(member("caf\u00e9"))
    refused(policy, member("cafe\u0301"), "already extracted")
    sensitive = ExtractionPolicy()
    decide_all(sensitive, [(LINK, "Link", "."), (FILE, "link/x", "")])  # two names there


# -- hard links ------------------------------------------------------------------------------


def test_hard_links_to_earlier_files_only() -> None:
    policy = ExtractionPolicy()
    decide_all(policy, [(FILE, "f", ""), (DIR, "d", ""), (LINK, "s", "f")])
    link = policy.decide(member("h", HARD, linkname="./f"))
    assert isinstance(link, Extraction)
    assert (link.link_target, link.mode) == ("f", 0)
    refused(policy, member("h2", HARD, linkname="later"), "'later', which was not extracted before")
    refused(policy, member("h3", HARD, linkname="d"), "'d', which is a directory, not a file")
    refused(policy, member("h4", HARD, linkname="s"), "'s', which is a symlink, not a file")
    refused(policy, member("h5", HARD, linkname="../f"), "the hard link's target has a '..'")
    refused(policy, member("h6", HARD, linkname="/etc/shadow"), "target is an absolute path")
    refused(policy, member("h7", HARD, linkname=""), "a hard link to '', which is not a file")
    refused(policy, member("h8", HARD, linkname="."), "a hard link to '.', which is not a file")
    chained = policy.decide(member("h9", HARD, linkname="h"))  # a link to a link is a file
    assert isinstance(chained, Extraction)


# -- budgets and wrong input -----------------------------------------------------------------


def test_member_budget() -> None:
    policy = ExtractionPolicy(TarLimits(max_members=3))
    decide_all(policy, [(FILE, "a", ""), (DIR, ".", ""), (FILE, "b", "")])
    refused(policy, member("c"), "more than the 3-member budget")


def test_byte_budget_counts_declared_sizes_before_any_data() -> None:
    policy = ExtractionPolicy(TarLimits(max_total_bytes=1000))
    policy.decide(member("a", size=600))
    refused(policy, member("b", size=401), "its 401 bytes would take the archive past the 1000")
    policy.decide(member("c", size=400))
    assert policy.total_bytes == 1000
    refused(policy, member("huge", size=10**30), "past the 1000-byte budget")


def test_name_budgets_are_configurable() -> None:
    policy = ExtractionPolicy(TarLimits(max_path_bytes=10, max_component_bytes=4))
    policy.decide(member("abcd/efgh"))
    refused(policy, member("abcd/ef/ghi"), "longer than 10 bytes")
    refused(policy, member("abcde"), "longer than 4 bytes")


def test_a_refusal_names_the_member_and_its_offset() -> None:
    error = refused(ExtractionPolicy(), member("../evil", index=3), "'..'")
    assert error.offset == 3 * 512
    assert str(error) == (
        "EXEC_FAILED: tar archive: the name has a '..' component (CVE-2018-1002100) "
        "(member '../evil' at offset 1536)"
    )


def test_wrong_arguments_are_invalid() -> None:
    untyped: Any = ExtractionPolicy  # the checks are for callers without a type checker
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: untyped().decide("a"), "decide\\(\\) takes a TarMember, not str"),
        (lambda: untyped({"max_members": 1}), "limits must be a TarLimits"),
        (lambda: untyped(symlink_rule="skip"), "symlink_rule must be a SymlinkRule"),
        (lambda: untyped(strip_components=-1), "strip_components must be an integer"),
        (lambda: untyped(strip_components=True), "strip_components must be an integer"),
        (lambda: untyped(windows=1), "windows must be True or False"),
        (lambda: untyped(case_insensitive=None), "case_insensitive must be True"),
        (lambda: TarLimits(max_members=0), "max_members must be a positive integer"),
    ]
    for call, message in cases:
        with pytest.raises(ExecError, match=message) as caught:
            call()
        assert caught.value.code is ExecErrorCode.INVALID


# -- the property ----------------------------------------------------------------------------

_rules = st.sampled_from(list(SymlinkRule))


def _extract_into_model(
    policy: ExtractionPolicy, model: ModelFS, members: list[TarMember]
) -> list[Extraction]:
    allowed: list[Extraction] = []
    for item in members:
        try:
            decision = policy.decide(item)
        except TarError:
            # A real extraction stops here; carrying on (the refused member left the view as
            # it was) lets the property reach deeper sequences, and must be as safe.
            continue
        if isinstance(decision, Extraction):
            parts = decision.path.split("/")
            assert decision.path
            assert not decision.path.startswith("/")
            assert all(part not in ("", ".", "..") for part in parts)
            assert all(decision.path.startswith(parent + "/") for parent in decision.new_parents)
            allowed.append(decision)
            model.apply(decision)  # raises Escape if anything lands outside
    model.check_links_stay_inside()
    return allowed


@settings(max_examples=600)
@given(
    items=hostile_members(),
    rule=st.sampled_from([SymlinkRule.CONTAINED, SymlinkRule.SKIP_ESCAPING]),
)
def test_whatever_the_members_nothing_lands_outside(
    items: list[tuple[TarKind, str, str]], rule: SymlinkRule
) -> None:
    members = [
        member(name, kind, linkname=link, index=index)
        for index, (kind, name, link) in enumerate(items)
    ]
    _extract_into_model(ExtractionPolicy(symlink_rule=rule), ModelFS(), members)


@settings(max_examples=500)
@given(items=hostile_members(), rule=_rules, strip=st.integers(0, 1), flags=st.sampled_from(
    [(False, False), (True, False), (True, True)]))  # fmt: skip
def test_whatever_the_options_nothing_lands_outside(
    items: list[tuple[TarKind, str, str]], rule: SymlinkRule, strip: int, flags: tuple[bool, bool]
) -> None:
    fold, windows = flags
    policy = ExtractionPolicy(
        symlink_rule=rule, strip_components=strip, case_insensitive=fold, windows=windows
    )
    members = [
        member(name, kind, linkname=link, index=index)
        for index, (kind, name, link) in enumerate(items)
    ]
    _extract_into_model(policy, ModelFS(fold=fold, windows=windows), members)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(items=hostile_members(), rule=_rules, cuts=cuts_strategy)
def test_whatever_the_archive_and_its_chunking_nothing_lands_outside(
    items: list[tuple[TarKind, str, str]], rule: SymlinkRule, cuts: list[int]
) -> None:
    specs = [Spec(name, kind, b"data" if kind is FILE else b"", link) for kind, name, link in items]
    raw = tarfile_archive(specs, tarfile.GNU_FORMAT)
    members = [read.member for read in read_archive(raw, cuts).members]
    _extract_into_model(ExtractionPolicy(symlink_rule=rule), ModelFS(), members)


def test_the_model_catches_what_a_policy_without_rules_would_allow() -> None:
    # The property is only as good as its model: a decision the policy would never make (a
    # write through an escaping symlink) must trip it.
    model = ModelFS()
    model.apply(Extraction(member=member("l", LINK), kind=LINK, path="l", link_target="../etc"))
    with pytest.raises(Escape, match="the parent of 'l/passwd' reached etc"):
        model.apply(Extraction(member=member("l/passwd"), kind=FILE, path="l/passwd"))
    with pytest.raises(Escape, match="the symlink dest/l leads to etc"):
        model.check_links_stay_inside()
    chained = ModelFS()
    for path, target, parents in (("a/b/x", "../..", ("a", "a/b")), ("a/b/l", "x/../..", ())):
        chained.apply(Extraction(member=member(path, LINK), kind=LINK, path=path,
                                 new_parents=parents, link_target=target))  # fmt: skip
    with pytest.raises(Escape, match="the symlink dest/a/b/l leads to /"):
        chained.check_links_stay_inside()
    # And a decision that assumes a parent nothing created.
    with pytest.raises(Inconsistent, match="the parent of 'a/f' is not a directory"):
        ModelFS().apply(Extraction(member=member("a/f"), kind=FILE, path="a/f"))


def test_a_skipped_symlink_creates_no_parents_in_the_view() -> None:
    # Nothing creates the parents of a skipped link, so a later member must still get them as
    # new parents (to be created, or checked if they exist) rather than assume them.
    policy = ExtractionPolicy(symlink_rule=SymlinkRule.SKIP_ALL)
    assert isinstance(policy.decide(member("a/b/l", LINK, linkname="x")), Skipped)
    later = policy.decide(member("a/b/f"))
    assert isinstance(later, Extraction)
    assert later.new_parents == ("a", "a/b")
    refused(policy, member("a/b/l/x"), "its parent 'a/b/l' is a symlink that was not extracted")
