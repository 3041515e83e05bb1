"""What the bare-metal tests (test_mcu*.py) share: the check that the Arm toolchain, QEMU and the
host build they compare with are there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOST_EMBER = REPO / "build" / "ember"


def need_toolchain() -> None:
    """Fails (naming what is missing and the make target that installs it) unless the Arm GCC,
    newlib, qemu-system-arm and the host `build/ember` are all present: `make test` installs
    and builds them first (mcu-deps, build), so a missing one is a broken set-up, not a reason
    to pass over the bare-metal tests."""
    missing = [t for t in ("arm-none-eabi-gcc", "qemu-system-arm") if not shutil.which(t)]
    if not Path("/usr/lib/arm-none-eabi/newlib").is_dir():
        missing.append("libnewlib-arm-none-eabi")
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed (run `make mcu-deps`)")
    if not HOST_EMBER.exists():
        pytest.fail("host build/ember is missing (run `make build`)")
