"""Copying files into and out of a container, without I/O: the commands a copy runs and how
their answers are read.

Every copy is one or more ordinary execs of ``sh -c SCRIPT sh ARG...`` (the ``*_command``
functions; every path travels as an argument, never spliced into a script). A probe
(:func:`probe_command`, :func:`parse_probe`) says what a path is and which tools the container
has; a transfer's stderr ends with a :class:`Summary` (:func:`parse_summary`) that
:func:`check_summary` compares with what moved; a failed one's messages name a
:class:`CopyProblem` (:func:`problem_of`). The checks of the arguments and of where an upload
goes are here too. The async layer (``kuber_exec_anyio``'s ``copy_to_pod``,
``copy_from_pod``, ``upload_stream``, ``download_stream``) runs the execs and moves the bytes;
the tar stream of a directory is :mod:`kuber_exec_core.tar`'s.
"""

from ._checks import MAX_REMOTE_PATH as MAX_REMOTE_PATH
from ._checks import check_readable as check_readable
from ._checks import check_remote_path as check_remote_path
from ._checks import check_retries as check_retries
from ._checks import check_summary as check_summary
from ._checks import join_remote as join_remote
from ._checks import upload_destination as upload_destination
from ._problems import CopyError as CopyError
from ._problems import CopyProblem as CopyProblem
from ._remote import UPLOAD_CHUNK_MIB as UPLOAD_CHUNK_MIB
from ._remote import Probe as Probe
from ._remote import Summary as Summary
from ._remote import download_file_command as download_file_command
from ._remote import download_tree_command as download_tree_command
from ._remote import first_line as first_line
from ._remote import parse_probe as parse_probe
from ._remote import parse_summary as parse_summary
from ._remote import probe_command as probe_command
from ._remote import problem_of as problem_of
from ._remote import remote_parent as remote_parent
from ._remote import upload_file_command as upload_file_command
from ._remote import upload_tree_command as upload_tree_command

__all__ = [
    # What went wrong
    "CopyError",
    "CopyProblem",
    # The commands and what they answer
    "Probe",
    "Summary",
    "UPLOAD_CHUNK_MIB",
    "download_file_command",
    "download_tree_command",
    "parse_probe",
    "parse_summary",
    "probe_command",
    "problem_of",
    "first_line",
    "remote_parent",
    "upload_file_command",
    "upload_tree_command",
    # The checks
    "MAX_REMOTE_PATH",
    "check_readable",
    "check_remote_path",
    "check_retries",
    "check_summary",
    "join_remote",
    "upload_destination",
]
