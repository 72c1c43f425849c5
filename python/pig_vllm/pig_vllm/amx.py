"""Linux's permission to use AMX tiles, for processes that run vLLM's CPU kernels themselves.

On a CPU with AMX (Intel Sapphire Rapids and later: lscpu's amx_tile flag), vLLM's CPU attention
takes its AMX path (csrc/cpu/cpu_attn_amx.hpp: tilezero, tileloadd, tdpbf16ps). Linux enables
the tiles' register state (XTILEDATA, 8 KiB a thread) only in a process that asked for it with
arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); the first tile instruction of any other
process is an illegal instruction (SIGILL, "Fatal Python error: Illegal instruction"). vLLM's own
CPU worker asks when it starts; a process that calls the kernels without that worker does not:
tests/test_layout.py, or anything that imports pig_vllm.backend and stages or attends outside
vLLM. request() asks once per process (the permission covers every thread of the process, those
already running included, and is kept until it exits); it is a no-op where there is nothing to ask
for, and harmless where vLLM already asked.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys

_SYS_ARCH_PRCTL = 158         # x86_64's syscall number (asm/unistd_64.h)
_ARCH_GET_XCOMP_PERM = 0x1022  # asm/prctl.h
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18       # the bit of XTILEDATA in the XSAVE feature mask

_result: bool | None = None


def cpu_has_amx() -> bool:
    """lscpu's amx_tile flag: the CPU has AMX and the kernel knows it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return "amx_tile" in line.split()
    except OSError:
        pass
    return False


def request() -> bool:
    """Asks Linux for this process's AMX tile permission; True when the process has it.

    False where the CPU has no AMX or this is not Linux on x86_64 (vLLM then takes another path
    and needs nothing). Raises OSError where the CPU has AMX and Linux refuses (a kernel before
    5.16, or a seccomp filter): vLLM's AMX kernels would kill the process with SIGILL later.
    """
    global _result
    if _result is not None:
        return _result
    if sys.platform != "linux" or platform.machine() != "x86_64" or not cpu_has_amx():
        _result = False
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # syscall() is variadic and reads its arguments as longs: pass longs, not ints.
    if libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM),
                    ctypes.c_long(_XFEATURE_XTILEDATA)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "pig_vllm: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed: "
                      f"{os.strerror(err)}; vLLM's AMX attention cannot run in this process")
    _result = True
    return True


def granted() -> bool:
    """Whether this process holds the AMX tile permission (ARCH_GET_XCOMP_PERM)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    mask = ctypes.c_uint64(0)
    if libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_GET_XCOMP_PERM),
                    ctypes.byref(mask)) != 0:
        return False
    return bool(mask.value >> _XFEATURE_XTILEDATA & 1)
