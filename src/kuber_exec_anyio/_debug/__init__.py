"""Attach, logs and ephemeral debug containers on anyio (docs/debug.md)."""
