"""Seccomp filters: no new user namespaces, no reach into another process's memory, no keys.

Inside a user namespace of its own, an unprivileged process holds every
capability over what that namespace owns: kernel surface no test needs. bwrap
closes it with `--disable-userns` where it makes the user namespace itself
(a non-root daemon, bubblewrap 0.8 or newer). A root daemon's sandbox has no
user namespace of bwrap's (its ids would map back to root), and older bwraps
lack the option: there, bwrap loads this filter (`--seccomp FD`) before it
executes the launcher, and it holds for everything the run starts.

The filter, per system call ABI the machine runs:

- `unshare` and `clone` with CLONE_NEWUSER fail with EPERM;
- `clone3` fails with ENOSYS (its flags sit in memory a filter cannot read;
  the C library then falls back to `clone`, which the filter can judge);
- on x86_64, x32 system calls fail with ENOSYS (a second numbering of the same
  calls, which nothing in a test run uses);
- anything else is allowed.

`setns` into an existing user namespace needs CAP_SYS_ADMIN over it, which
the run does not have, and is left alone.

A graded run's launcher also loads `graded_run_filter` (jouled.pipeline.launcher):

- `ptrace`, `process_vm_readv` and `process_vm_writev` fail with EPERM, so no process
  of the run reads or writes the test process's memory through the kernel's debugging
  interfaces (its `/proc/<pid>/mem` is closed by the launcher's Landlock rules);
- `add_key`, `request_key` and `keyctl` fail with EPERM: the kernel's keyrings outlive
  a run (a root daemon's runs share the host's user namespace), so a run could leave a
  key that a later one reads, such as the recheck of the same attempt.
"""

from __future__ import annotations

import errno
import platform
import struct
from collections.abc import Callable
from dataclasses import dataclass

CLONE_NEWUSER = 0x10000000

# BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # little-endian: the low half of args[0] comes first


@dataclass(frozen=True)
class _Abi:
    audit_arch: int
    unshare: int
    clone: int
    clone3: int
    memory: tuple[int, int, int]  # ptrace, process_vm_readv, process_vm_writev
    keys: tuple[int, int, int]  # add_key, request_key, keyctl
    x32_floor: int | None = None  # x86_64: numbers from here on are x32's


# The ABIs each machine runs natively or in compat mode, by `platform.machine()`.
_ABIS: dict[str, tuple[_Abi, ...]] = {
    "x86_64": (
        _Abi(0xC000003E, 272, 56, 435, (101, 310, 311), (248, 249, 250), x32_floor=0x40000000),
        _Abi(0x40000003, 310, 120, 435, (26, 347, 348), (286, 287, 288)),  # i386
    ),
    "aarch64": (
        _Abi(0xC00000B7, 97, 220, 435, (117, 270, 271), (217, 218, 219)),
        _Abi(0x40000028, 337, 120, 435, (26, 376, 377), (309, 310, 311)),  # arm (compat)
    ),
}


def supported(machine: str | None = None) -> bool:
    return (machine or platform.machine()) in _ABIS


def no_new_userns(machine: str | None = None) -> bytes | None:
    """The filter program for `machine` (this one by default); None where none is known.

    A call from an ABI the table does not know fails with EPERM: it could
    create a namespace the table cannot see.
    """
    abis = _ABIS.get(machine or platform.machine())
    if abis is None:
        return None

    def calls(program: _Program, abi: _Abi) -> None:
        program.op(_JEQ_K, abi.unshare, "flags", 0)
        program.op(_JEQ_K, abi.clone, "flags", 0)
        program.op(_JEQ_K, abi.clone3, "enosys", 0)

    program = _Program()
    program.per_abi(abis, calls)
    program.at("flags")
    program.op(_LD_W_ABS, _ARG0_LOW)
    program.op(_JSET_K, CLONE_NEWUSER, "eperm", 0)
    program.op(_RET_K, _ALLOW)
    return program.finish()


def graded_run_filter(machine: str | None = None) -> bytes | None:
    """The filter refusing `ptrace`, `process_vm_readv`/`writev` and the key management
    calls on `machine`; None where none is known. A call from an ABI the table does not
    know fails with EPERM."""
    abis = _ABIS.get(machine or platform.machine())
    if abis is None:
        return None

    def calls(program: _Program, abi: _Abi) -> None:
        for number in (*abi.memory, *abi.keys):
            program.op(_JEQ_K, number, "eperm", 0)

    program = _Program()
    program.per_abi(abis, calls)
    return program.finish()


class _Program:
    """BPF instructions (op, jump if true, jump if false, k), jumps to labels resolved at
    the end; every program ends in the labels "eperm" and "enosys"."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def at(self, label: str) -> None:
        self.labels[label] = len(self.code)

    def op(self, opcode: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        self.code.append((opcode, jt, jf, k))

    def per_abi(self, abis: tuple[_Abi, ...], calls: Callable[[_Program, _Abi], None]) -> None:
        """Dispatch on the calling ABI (one not in the table: EPERM), load the call's
        number (x32's: ENOSYS), then `calls`' checks for that ABI; anything else passes."""
        self.op(_LD_W_ABS, _ARCH)
        for i, abi in enumerate(abis):
            self.op(_JEQ_K, abi.audit_arch, f"abi{i}", 0)
        self.op(_RET_K, _ERRNO | errno.EPERM)  # an ABI not in the table
        for i, abi in enumerate(abis):
            self.at(f"abi{i}")
            self.op(_LD_W_ABS, _NR)
            if abi.x32_floor is not None:
                self.op(_JGE_K, abi.x32_floor, "enosys", 0)
            calls(self, abi)
            self.op(_RET_K, _ALLOW)

    def finish(self) -> bytes:
        self.at("eperm")
        self.op(_RET_K, _ERRNO | errno.EPERM)
        self.at("enosys")
        self.op(_RET_K, _ERRNO | errno.ENOSYS)
        out = bytearray()
        for index, (opcode, jt, jf, k) in enumerate(self.code):
            jumps = []
            for target in (jt, jf):
                offset = target if isinstance(target, int) else self.labels[target] - index - 1
                if not 0 <= offset <= 255:
                    raise AssertionError(f"seccomp jump out of range at {index}")
                jumps.append(offset)
            out += struct.pack("<HBBI", opcode, jumps[0], jumps[1], k)
        return bytes(out)
