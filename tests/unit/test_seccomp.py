"""apps.agent.seccomp: the pod filter, loaded by a real bubblewrap on this kernel, and the
same program run through a small classic-BPF interpreter (which also covers aarch64, which
this host cannot execute).

Each refusal is checked against a control run without the filter, so a test fails if the
call would have been refused anyway (say, for lack of privilege). The sandboxed tests need
bubblewrap (CI installs it) and an x86_64 or aarch64 host; they skip only without those.
"""

from __future__ import annotations

import errno
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from apps.agent import seccomp

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
BWRAP = [
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--unshare-pid",
    "--die-with-parent",
]
HOST_ARCH = seccomp.normalize_arch()
EPERM = seccomp.SECCOMP_RET_ERRNO | errno.EPERM
ENOSYS = seccomp.SECCOMP_RET_ERRNO | errno.ENOSYS
ALLOW = seccomp.SECCOMP_RET_ALLOW
KILL = seccomp.SECCOMP_RET_KILL_PROCESS
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
CLONE_NEWUSER = 0x10000000
SIGCHLD = 17
# What glibc's pthread_create passes to clone (CLONE_VM | CLONE_FS | ... | CLONE_SETTLS ...).
THREAD_FLAGS = 0x003D0F00


def sandbox(argv: list[str], *, filtered: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `argv` as root in bwrap, with the pod filter unless `filtered` is False."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("bubblewrap is not installed")
    if HOST_ARCH is None:
        pytest.skip(f"no seccomp table for {platform.machine()}")
    if not filtered:
        return subprocess.run(
            [bwrap, *BWRAP, "--", *argv], env=ENV, capture_output=True, text=True, timeout=60
        )
    program = seccomp.pod_filter()
    assert program is not None
    fd = seccomp.filter_fd(program)
    try:
        return subprocess.run(
            [bwrap, *BWRAP, "--seccomp", str(fd), "--", *argv],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
            pass_fds=[fd],
        )
    finally:
        os.close(fd)


def python(code: str, *, filtered: bool = True) -> subprocess.CompletedProcess[str]:
    return sandbox([sys.executable, "-c", textwrap.dedent(code)], filtered=filtered)


# --- the filter in a real sandbox -------------------------------------------------------


def test_the_filter_is_loaded():
    result = sandbox(["grep", "Seccomp:", "/proc/self/status"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["Seccomp:", "2"]


@pytest.mark.parametrize(
    "argv",
    [
        ["unshare", "-r", "true"],
        ["unshare", "-n", "true"],
        ["mount", "-t", "tmpfs", "none", "/tmp"],
    ],
    ids=["unshare-user", "unshare-net", "mount"],
)
def test_escape_commands_work_without_the_filter_and_fail_with_it(argv):
    control = sandbox(argv, filtered=False)
    assert control.returncode == 0, f"control failed, so the test proves nothing: {control}"
    result = sandbox(argv)
    assert result.returncode != 0
    # util-linux's mount words EPERM as "permission denied"
    assert re.search("not permitted|permission denied", result.stderr, re.I), result.stderr


# Each probe prints "<return value> <errno>" of one raw system call made through ctypes.
PROBE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
def call(nr, *args):
    ctypes.set_errno(0)
    return libc.syscall(L(nr), *args), ctypes.get_errno()
"""

PROBES = {
    # PTRACE_TRACEME from a child of this process: bwrap's pid 1, which has dropped its
    # capabilities, would refuse to be the tracer of its own child anyway.
    "ptrace": "pid = os.fork()\n"
    "if pid == 0:\n"
    "    print(*call(NR['ptrace'], L(0), L(0), L(0), L(0)), flush=True)\n"
    "    os._exit(0)\n"
    "os.waitpid(pid, 0)\n"
    "os._exit(0)",
    # KEYCTL_GET_KEYRING_ID of KEY_SPEC_SESSION_KEYRING, creating it
    "keyctl": "r = call(NR['keyctl'], L(0), L(-3), L(1))",
    "add_key": "r = call(NR['add_key'], b'user', b'pw-test', b'v', L(1), L(-2))",
    "bpf": "r = call(NR['bpf'], L(5), None, L(0))",  # BPF_PROG_LOAD with no attr
    "unshare": f"r = call(NR['unshare'], L({CLONE_NEWUSER}))",
    "clone": f"r = call(NR['clone'], L({CLONE_NEWUSER | SIGCHLD}), None, None, None, L(0))\n"
    "if r[0] == 0: os._exit(0)\n"
    "if r[0] > 0: os.waitpid(r[0], 0)",
    "personality": "r = call(NR['personality'], L(0x0040000))",  # ADDR_NO_RANDOMIZE
    "clone3": "r = call(NR['clone3'], None, L(0))",
}


def host_table() -> dict[str, int]:
    if HOST_ARCH is None:
        pytest.skip(f"no seccomp table for {platform.machine()}")
    return seccomp.syscall_table(HOST_ARCH)


def probe(name: str, *, filtered: bool = True) -> tuple[int, int]:
    code = f"{PROBE}\nNR = {host_table()!r}\n{PROBES[name]}\nprint(*r)\n"
    result = python(code, filtered=filtered)
    assert result.returncode == 0, result.stderr
    ret, err = result.stdout.split()
    return int(ret), int(err)


@pytest.mark.parametrize(
    "name", ["ptrace", "keyctl", "add_key", "bpf", "unshare", "clone", "personality"]
)
def test_the_filter_refuses_dangerous_calls_with_eperm(name):
    control = probe(name, filtered=False)
    assert control[1] != errno.EPERM, f"{name} is refused even without the filter: {control}"
    assert probe(name) == (-1, errno.EPERM)


def test_clone3_says_enosys_so_libc_falls_back_to_clone():
    assert probe("clone3", filtered=False)[1] != errno.ENOSYS
    assert probe("clone3") == (-1, errno.ENOSYS)


@pytest.mark.skipif(HOST_ARCH != "x86_64", reason="x32 exists only on x86_64")
def test_x32_calls_are_refused():
    getpid_x32 = seccomp.X32_SYSCALL_BIT | 39
    code = f"{PROBE}\nprint(*call({getpid_x32}))"
    assert python(code).stdout.split() == ["-1", str(errno.EPERM)]


def test_personality_queries_still_work():
    code = (
        f"{PROBE}\nNR = {host_table()!r}\n"
        "print(call(NR['personality'], L(0xFFFFFFFF))[0], call(NR['personality'], L(0))[0])"
    )
    result = python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "0"]


def test_a_shell_with_pipes_subshells_and_background_jobs_runs():
    script = (
        "set -e; seq 1 5000 | sort -rn | head -1 | grep -qx 5000; "
        "(sleep 0.1; echo bg > /dev/null) & sleep 0.05 & wait; "
        'x=$(echo sub | tr a-z A-Z); test "$x" = SUB; echo ok'
    )
    result = sandbox(["bash", "-c", script])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_python_threads_run():
    result = python("""
        import threading
        out = []
        threads = [threading.Thread(target=lambda i=i: out.append(sum(range(i * 1000))))
                   for i in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(len(out))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "8\n"


def test_a_multiprocessing_pool_runs():
    result = python("""
        import multiprocessing
        if __name__ == "__main__":
            with multiprocessing.Pool(2) as pool:
                print(sum(pool.map(abs, range(-100, 0))))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "5050\n"


def test_fork_and_exec_run():
    result = python("""
        import os, subprocess
        pid = os.fork()
        if pid == 0:
            os.execv("/bin/sh", ["sh", "-c", "exit 7"])
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), subprocess.run(["true"]).returncode)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "7 0\n"


# --- the program itself -----------------------------------------------------------------


def run_bpf(prog: list[seccomp.Insn], nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """Interpret the program on one struct seccomp_data, as the kernel would."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        pc += 1
        if code == seccomp.BPF_LD_W_ABS:
            (acc,) = struct.unpack_from("<I", data, k)
        elif code == seccomp.BPF_JEQ_K:
            pc += jt if acc == k else jf
        elif code == seccomp.BPF_JSET_K:
            pc += jt if acc & k else jf
        elif code == seccomp.BPF_RET_K:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


ARCHES = ["x86_64", "aarch64"]


@pytest.mark.parametrize("arch", ARCHES)
def test_the_program_is_well_formed(arch):
    prog = seccomp.instructions(arch)
    assert prog is not None and len(prog) < 4096
    for pc, (code, jt, jf, _k) in enumerate(prog):
        assert 0 <= jt <= 255 and 0 <= jf <= 255
        if code in (seccomp.BPF_JEQ_K, seccomp.BPF_JSET_K):
            assert pc + 1 + max(jt, jf) < len(prog), f"jump out of the program at {pc}"
        else:
            assert jt == jf == 0
    assert prog[-1] == (seccomp.BPF_RET_K, 0, 0, ALLOW)
    packed = seccomp.pod_filter(arch)
    assert packed is not None and len(packed) == 8 * len(prog)
    assert struct.unpack_from("<HBBI", packed, 8) == prog[1]


@pytest.mark.parametrize("arch", ARCHES)
def test_the_program_decides_as_documented(arch):
    prog = seccomp.instructions(arch)
    assert prog is not None
    table = seccomp.syscall_table(arch)
    audit = AUDIT_ARCH[arch]
    for name in seccomp.BLOCKED:
        if name in table:
            assert run_bpf(prog, table[name], audit) == EPERM, name
    assert run_bpf(prog, table["clone3"], audit) == ENOSYS
    assert run_bpf(prog, table["clone"], audit, (THREAD_FLAGS,)) == ALLOW
    assert run_bpf(prog, table["clone"], audit, (SIGCHLD,)) == ALLOW
    for flag in (
        0x80,
        0x20000,
        0x02000000,
        0x04000000,
        0x08000000,
        0x10000000,
        0x20000000,
        0x40000000,
    ):
        assert run_bpf(prog, table["clone"], audit, (flag | SIGCHLD,)) == EPERM, hex(flag)
    for persona, verdict in (
        (0, ALLOW),
        (0xFFFFFFFF, ALLOW),
        (0x0040000, EPERM),
        (0x0400000, EPERM),
        (0x0008, EPERM),
    ):
        assert run_bpf(prog, table["personality"], audit, (persona,)) == verdict, hex(persona)
    for family, verdict in ((2, ALLOW), (10, ALLOW), (1, ALLOW), (16, ALLOW), (40, EPERM)):
        assert run_bpf(prog, table["socket"], audit, (family,)) == verdict, family
    special = set(table.values())
    for nr in range(0, 460):  # every other call, e.g. read, write, openat, execve
        if nr not in special:
            assert run_bpf(prog, nr, audit) == ALLOW, nr
    other = AUDIT_ARCH["aarch64" if arch == "x86_64" else "x86_64"]
    assert run_bpf(prog, 0, other) == KILL
    assert run_bpf(prog, 0, 0x40000003) == KILL  # AUDIT_ARCH_I386, the int 0x80 path
    x32 = run_bpf(prog, seccomp.X32_SYSCALL_BIT | 0, audit)
    assert x32 == (EPERM if arch == "x86_64" else ALLOW)


@pytest.mark.parametrize("arch", ARCHES)
def test_each_table_has_every_blocked_name(arch):
    table = seccomp.syscall_table(arch)
    missing = set(seccomp.BLOCKED) - set(table)
    assert missing == (set() if arch == "x86_64" else set(seccomp.X86_ONLY))
    assert {"clone", "clone3", "personality", "socket"} <= set(table)
    assert len(set(table.values())) == len(table), "two names share a number"


def test_unsupported_architectures_have_no_filter():
    assert seccomp.pod_filter("sparc") is None
    assert seccomp.instructions("riscv64") is None
    assert seccomp.pod_filter() == seccomp.pod_filter(platform.machine())
    assert seccomp.pod_filter("amd64") == seccomp.pod_filter("x86_64")


def test_filter_fd_holds_the_program_at_offset_zero():
    program = seccomp.pod_filter("x86_64")
    assert program is not None
    fd = seccomp.filter_fd(program)
    try:
        assert not os.get_inheritable(fd)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
        assert os.read(fd, len(program) + 1) == program
    finally:
        os.close(fd)


def _header_numbers(path: Path) -> dict[str, int]:
    text = path.read_text()
    return {
        m[1]: int(m[2]) for m in re.finditer(r"^#define __NR_(\w+)\s+(\d+)\s*$", text, re.MULTILINE)
    }


@pytest.mark.optional
@pytest.mark.parametrize(
    "arch, header",
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
        ("aarch64", "/usr/include/asm-generic/unistd.h"),
    ],
)
def test_the_tables_match_the_kernel_headers(arch, header):
    path = Path(header)
    if not path.is_file():
        pytest.skip(f"{header} is not installed")
    assert seccomp.syscall_table(arch) == {
        name: number
        for name, number in _header_numbers(path).items()
        if name in seccomp.syscall_table(arch)
    }
    assert set(seccomp.syscall_table(arch)) <= set(_header_numbers(path))
