"""Settings the code and the deployment share: infra/*.tf reads the same file and
tests/infra/test_drift.py fails on any drift."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SHARED: dict[str, Any] = json.loads(Path(__file__).with_name("shared_settings.json").read_text())
