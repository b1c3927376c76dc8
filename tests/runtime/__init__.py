"""Tests against a real container runtime's exec streaming server (containerd's CRI plugin)."""
