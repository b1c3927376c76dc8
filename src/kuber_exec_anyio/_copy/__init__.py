"""Copying files into and out of a container: uploads, downloads and the transfer exec that
moves their bytes, over the core's copy rules (``kuber_exec_core.copy``) and tar codec."""
