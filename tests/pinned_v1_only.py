"""A worker that serves version 1 of the pinned kind "shop.pinned" and no other
(TASKLEASE_KINDS=tests.pinned_v1_only): tests/e2e/test_version_crash.py."""

from tests.versioned_kinds import pinned_v1

__all__ = ["pinned_v1"]
