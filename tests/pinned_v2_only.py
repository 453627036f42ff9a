"""A worker that serves version 2 of the pinned kind "shop.pinned" and no other
(TASKLEASE_KINDS=tests.pinned_v2_only): tests/e2e/test_version_crash.py."""

from tests.versioned_kinds import pinned_v2

__all__ = ["pinned_v2"]
