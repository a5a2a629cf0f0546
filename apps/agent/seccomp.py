"""A classic-BPF seccomp filter for pod processes, for `bwrap --seccomp FD`.

Pods run users' shell commands. The bubblewrap sandbox already hides most of the host, but
a process that is root inside it (or that can create a user namespace to become root) could
still mount file systems, load kernel modules, trace other processes or build new
namespaces to escape it. This filter refuses those system calls with EPERM, the way
Docker's default profile does, and allows everything else, so ordinary training work
(shells, pipelines, threads, multiprocessing, fork/exec) is unaffected.

The program is built here by hand rather than with libseccomp so the agent needs no native
dependency; bwrap reads the raw `struct sock_filter` array from a file descriptor and loads
it itself (after setting no_new_privs, which unprivileged seccomp requires).

Layout of the program:

1. `seccomp_data.arch` must be the expected AUDIT_ARCH, else the process is killed: a
   64-bit x86 process can still enter the kernel through the i386 `int 0x80` path, with
   other syscall numbers that this filter does not list.
2. On x86_64, x32 system calls (`nr & 0x40000000`) are refused: they share the x86_64 arch
   token but number the calls differently.
3. Each name in BLOCKED: `jeq nr` then `ret ERRNO(EPERM)`, so no jump is longer than one
   instruction (classic BPF jump offsets are 8 bits).
4. `clone3` returns ENOSYS: its flags live in a user-space struct that seccomp cannot read,
   and glibc falls back to `clone` on ENOSYS (Docker's profile does the same).
5. `clone` is refused when its flags (arg0, low 32 bits; the kernel's legacy clone ignores
   the high bits) contain a namespace flag.
6. `personality` is allowed only for 0 (PER_LINUX) and 0xffffffff (the query glibc and
   Python's `platform` module make); other personas can turn off ASLR or make data
   executable (READ_IMPLIES_EXEC), so they are refused.
7. `socket` is refused for AF_VSOCK (arg0): virtual machine sockets belong to no network
   namespace, so a pod would reach the hypervisor's services (and other VMs') past the
   job's namespace, which has only a loopback. Docker's profile refuses it too.
8. Everything else is allowed.
"""

from __future__ import annotations

import errno
import os
import platform
import struct
import tempfile

__all__ = ["BLOCKED", "X86_ONLY", "filter_fd", "pod_filter"]

# Unconditionally refused with EPERM (where the architecture has the call).
BLOCKED: tuple[str, ...] = (
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "keyctl",
    "add_key",
    "request_key",
    "unshare",
    "setns",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "syslog",
    "acct",
    "quotactl",
    "open_by_handle_at",
    "name_to_handle_at",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "iopl",
    "ioperm",
    "uselib",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "lookup_dcookie",
    # io_uring runs operations outside this filter's view (Docker's profile refuses it too).
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)

# Names in BLOCKED that exist only on x86 (the generic table used by aarch64 lacks them).
X86_ONLY: frozenset[str] = frozenset({"iopl", "ioperm", "uselib"})

# Handled with argument checks or another errno, so not in BLOCKED.
_SPECIAL = ("clone", "clone3", "personality", "socket")

# From /usr/include/x86_64-linux-gnu/asm/unistd_64.h (checked on the build host).
_X86_64: dict[str, int] = {
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "chroot": 161,
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "unshare": 272,
    "setns": 308,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "reboot": 169,
    "swapon": 167,
    "swapoff": 168,
    "syslog": 103,
    "acct": 163,
    "quotactl": 179,
    "open_by_handle_at": 304,
    "name_to_handle_at": 303,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "move_mount": 429,
    "open_tree": 428,
    "mount_setattr": 442,
    "iopl": 172,
    "ioperm": 173,
    "uselib": 134,
    "settimeofday": 164,
    "clock_settime": 227,
    "clock_adjtime": 305,
    "adjtimex": 159,
    "vhangup": 153,
    "lookup_dcookie": 212,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "clone": 56,
    "clone3": 435,
    "personality": 135,
    "socket": 41,
}

# From /usr/include/asm-generic/unistd.h, the table aarch64 uses.
_AARCH64: dict[str, int] = {
    "mount": 40,
    "umount2": 39,
    "pivot_root": 41,
    "chroot": 51,
    "ptrace": 117,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "kcmp": 272,
    "keyctl": 219,
    "add_key": 217,
    "request_key": 218,
    "unshare": 97,
    "setns": 268,
    "bpf": 280,
    "perf_event_open": 241,
    "userfaultfd": 282,
    "kexec_load": 104,
    "kexec_file_load": 294,
    "init_module": 105,
    "finit_module": 273,
    "delete_module": 106,
    "reboot": 142,
    "swapon": 224,
    "swapoff": 225,
    "syslog": 116,
    "acct": 89,
    "quotactl": 60,
    "open_by_handle_at": 265,
    "name_to_handle_at": 264,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "move_mount": 429,
    "open_tree": 428,
    "mount_setattr": 442,
    "settimeofday": 170,
    "clock_settime": 112,
    "clock_adjtime": 266,
    "adjtimex": 171,
    "vhangup": 58,
    "lookup_dcookie": 18,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "clone": 220,
    "clone3": 435,
    "personality": 92,
    "socket": 198,
}

# arch name -> (AUDIT_ARCH_* token, syscall table, whether x32 calls must be refused)
_ARCHES: dict[str, tuple[int, dict[str, int], bool]] = {
    "x86_64": (0xC000003E, _X86_64, True),
    "aarch64": (0xC00000B7, _AARCH64, False),
}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}

# Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K

# seccomp return actions (linux/seccomp.h).
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

# struct seccomp_data offsets; args are u64, low word first on little-endian arches.
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LO = 0, 4, 16

X32_SYSCALL_BIT = 0x40000000
CLONE_NS_FLAGS = (
    0x00000080  # CLONE_NEWTIME
    | 0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
PERSONALITY_ALLOWED = (0x00000000, 0xFFFFFFFF)  # PER_LINUX, and the query
AF_VSOCK = 40

BPF_MAXINSNS = 4096

Insn = tuple[int, int, int, int]  # (code, jt, jf, k)


def _ld(offset: int) -> Insn:
    return (BPF_LD_W_ABS, 0, 0, offset)


def _jeq(k: int, jt: int, jf: int) -> Insn:
    return (BPF_JEQ_K, jt, jf, k)


def _jset(k: int, jt: int, jf: int) -> Insn:
    return (BPF_JSET_K, jt, jf, k)


def _ret(k: int) -> Insn:
    return (BPF_RET_K, 0, 0, k)


def _errno(err: int) -> int:
    return SECCOMP_RET_ERRNO | (err & 0xFFFF)


def normalize_arch(arch: str | None = None) -> str | None:
    """The table key for `arch` (default: this machine), or None if there is no table."""
    name = (arch if arch is not None else platform.machine()).lower()
    name = _ALIASES.get(name, name)
    return name if name in _ARCHES else None


def syscall_table(arch: str) -> dict[str, int]:
    """A copy of the syscall-number table for `arch` (KeyError if unsupported)."""
    return dict(_ARCHES[_ALIASES.get(arch, arch)][1])


def instructions(arch: str | None = None) -> list[Insn] | None:
    """The filter as (code, jt, jf, k) tuples, or None for an unsupported arch.

    Kept separate from pod_filter so tests can interpret the program for architectures
    the host cannot run.
    """
    name = normalize_arch(arch)
    if name is None:
        return None
    audit_arch, table, refuse_x32 = _ARCHES[name]
    eperm = _errno(errno.EPERM)

    prog: list[Insn] = [
        _ld(_OFF_ARCH),
        _jeq(audit_arch, 1, 0),
        _ret(SECCOMP_RET_KILL_PROCESS),
        _ld(_OFF_NR),
    ]
    if refuse_x32:
        prog += [_jset(X32_SYSCALL_BIT, 0, 1), _ret(eperm)]

    for syscall in BLOCKED:
        if syscall in table:
            prog += [_jeq(table[syscall], 0, 1), _ret(eperm)]

    prog += [_jeq(table["clone3"], 0, 1), _ret(_errno(errno.ENOSYS))]

    # A still holds nr here; each block below reloads A only once it has matched, and
    # then ends in a return, so the next block again sees nr.
    prog += [
        _jeq(table["clone"], 0, 4),
        _ld(_OFF_ARG0_LO),
        _jset(CLONE_NS_FLAGS, 0, 1),
        _ret(eperm),
        _ret(SECCOMP_RET_ALLOW),
    ]
    prog += [
        _jeq(table["socket"], 0, 4),
        _ld(_OFF_ARG0_LO),
        _jeq(AF_VSOCK, 0, 1),
        _ret(eperm),
        _ret(SECCOMP_RET_ALLOW),
    ]
    allowed = PERSONALITY_ALLOWED
    prog += [
        _jeq(table["personality"], 0, 2 + len(allowed)),
        _ld(_OFF_ARG0_LO),
        *(_jeq(value, len(allowed) - i, 0) for i, value in enumerate(allowed)),
        _ret(eperm),
    ]
    prog.append(_ret(SECCOMP_RET_ALLOW))
    assert len(prog) < BPF_MAXINSNS
    return prog


def pod_filter(arch: str | None = None) -> bytes | None:
    """The pod filter as packed `struct sock_filter` entries, or None if `arch` (default:
    `platform.machine()`) is neither x86_64 nor aarch64; the caller then runs the pod
    without seccomp and reports that it is unavailable.
    """
    prog = instructions(arch)
    if prog is None:
        return None
    return b"".join(struct.pack("<HBBI", code, jt, jf, k) for code, jt, jf, k in prog)


def filter_fd(program: bytes) -> int:
    """A readable fd holding `program`, rewound to offset 0, for `bwrap --seccomp FD`.

    A memfd (nothing on disk to clean up; an unlinked temporary file where memfd_create is
    missing), non-inheritable: pass it to bwrap with `Popen(..., pass_fds=[fd])`. The caller
    owns it and must `os.close` it once bwrap has been started (the child has its own copy,
    which bwrap reads to EOF at start-up). Use a fresh fd per bwrap: the read moves the
    shared file offset to the end.
    """
    try:
        fd = os.memfd_create("paiweb-seccomp", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        with tempfile.TemporaryFile() as tmp:
            fd = os.dup(tmp.fileno())  # os.dup makes it non-inheritable
    try:
        view = memoryview(program)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
