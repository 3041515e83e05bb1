"""Shared by the EmberVulkanBackend tests: the Vulkan device libember sees, and the skip marker
for a machine (or a libember build) without one."""

from __future__ import annotations

import ctypes

import pytest

VK = "EmberVulkanBackend"


def vulkan_device() -> str | None:
    """The name of the Vulkan device EmberVulkanBackend uses, or None (no device, or libember
    built without Vulkan)."""
    from ember._lib import lib

    L = lib()
    if not hasattr(L, "em_vulkan_device_name"):
        return None
    L.em_vulkan_device_name.restype = ctypes.c_char_p
    name = L.em_vulkan_device_name()
    return name.decode() if name else None


DEVICE = vulkan_device()
needs_vulkan = pytest.mark.skipif(
    DEVICE is None,
    reason="no Vulkan device, or libember built without Vulkan (EMBER_VULKAN): "
    "`make vulkan-deps` installs lavapipe, the loader, headers and glslangValidator",
)
