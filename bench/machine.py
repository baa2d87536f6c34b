"""What every benchmark records about the machine it ran on: the CPU model, cores, Python and the
load average, so a figure in bench/results can be read against the conditions it was measured in."""
from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> float | None:
    """The 1-minute load average (other work on the same cores), or None where it is unknown."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None
