"""The tar module's public surface: a submodule of the core, not names at its top level."""

from __future__ import annotations

import kuber_exec_core
from kuber_exec_core import tar


def test_every_public_name_resolves_and_stays_out_of_the_top_level() -> None:
    assert tar.__all__
    assert len(tar.__all__) == len(set(tar.__all__))
    assert [name for name in tar.__all__ if not hasattr(tar, name)] == []
    assert not set(tar.__all__) & set(kuber_exec_core.__all__)


def test_tar_errors_are_exec_errors_and_pickle() -> None:
    import pickle

    error = tar.TarError("bad checksum", member="a", offset=512)
    assert isinstance(error, kuber_exec_core.ExecError)
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.code, again.message) == (tar.TarError, error.code, error.message)
    assert (again.member, again.offset) == ("a", 512)
    assert repr(again) == (
        "TarError('EXEC_FAILED', \"tar archive: bad checksum (member 'a' at offset 512)\")"
    )
