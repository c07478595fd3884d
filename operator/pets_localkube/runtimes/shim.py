"""The container "init" of the local kubelet: one per container, the way a runtime shim holds a container.

    python -I -S shim.py --status-fd FD [--read-only PATH ...] -- ARGV...

A container runtime ends every process of a container when its PID 1 exits (the kernel kills a
PID namespace's processes with its init). Local processes have no PID namespace, and a program
can start helpers in their own session (`setsid`, daemons, some launchers' workers), which a
process-group kill misses and which would go on running, reparented to init, holding the log
pipe open. This shim gives a container that unit:

- it makes itself a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): every process the container
  starts stays its descendant, orphans included, whatever session or group they move to;
- it starts ARGV as the container's main process, in a new session, and reports
  `started <pid>` (or `error <message>`) on FD;
- when the main process exits, it SIGKILLs every remaining descendant, reaps them, and exits
  with the main process's exit code (128 + N for a signal N, as runtimes report);
- SIGTERM and SIGINT are passed to the main process's group (the kubelet's graceful stop);
  SIGUSR1 SIGKILLs the main process's group (the end of the grace period), which ends the rest.

`--read-only PATH`: in a private mount namespace of the container, PATH is bind-mounted onto itself
read-only (what `readOnly: true` mounts do in a real pod). That needs CAP_SYS_ADMIN (root) or an
unprivileged user namespace; where neither is to be had, the shim says so on FD
(`read-only-unenforced <reason>`) and the container runs with the paths writable.

It uses the standard library only and is run with `-I -S`: it starts fast and no pod environment
(PYTHONPATH, ...) changes how it runs.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
# statvfs f_flag bits -> the mount flags a remount of a bind mount must keep (they are locked in a user namespace)
_KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
               (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def become_subreaper(libc) -> bool:
    try:
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except AttributeError:  # not Linux
        return False


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def make_read_only(libc, paths: list[str]) -> None:
    """A private mount namespace in which each path is a read-only bind mount of itself."""
    if libc.unshare(CLONE_NEWNS) != 0:
        # Not privileged: a user namespace (uid and gid mapped to themselves) owning the mount namespace.
        uid, gid = os.getuid(), os.getgid()
        _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    for path in paths:
        target = os.fsencode(path)
        _check(libc.mount(target, target, None, MS_BIND | MS_REC, None), f"bind-mounting {path}")
        kept = 0
        flags = os.statvfs(path).f_flag
        for bit, mount_flag in _KEPT_FLAGS:
            if flags & bit:
                kept |= mount_flag
        _check(libc.mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept, None), f"remounting {path} read-only")


def descendants(root: int) -> list[int]:
    """Every live process below `root`, from /proc (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields and fields[0] != b"Z":  # zombies are dead already; reaping takes them
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_all(main_pid: int) -> None:
    """SIGKILL whatever the container left (main's group, then every descendant) until nothing is left."""
    try:
        os.killpg(main_pid, signal.SIGKILL)
    except OSError:
        pass
    me = os.getpid()
    for _ in range(1000):
        left = descendants(me)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        time.sleep(0.01)
    while True:  # the last children, if any
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def parse(argv: list[str]) -> tuple[int, list[str], list[str]]:
    status_fd, read_only = -1, []
    index = 0
    while index < len(argv) and argv[index] != "--":
        option = argv[index]
        if option == "--status-fd":
            status_fd = int(argv[index + 1])
        elif option == "--read-only":
            read_only.append(argv[index + 1])
        else:
            raise SystemExit(f"shim: unknown option {option}")
        index += 2
    command = argv[index + 1:]
    if status_fd < 0 or not command:
        raise SystemExit("usage: shim.py --status-fd FD [--read-only PATH ...] -- ARGV...")
    return status_fd, read_only, command


def main(argv: list[str]) -> int:
    status_fd, read_only, command = parse(argv)
    os.set_inheritable(status_fd, False)  # the container's processes never see it
    status = os.fdopen(status_fd, "w", buffering=1, encoding="utf-8")
    libc = _libc()
    become_subreaper(libc)
    if read_only:
        try:
            make_read_only(libc, read_only)
        except OSError as error:
            status.write(f"read-only-unenforced {error.strerror or error}\n")
    main_pid = 0

    def forward(signum, _frame) -> None:
        if main_pid:
            try:
                os.killpg(main_pid, signal.SIGKILL if signum == signal.SIGUSR1 else signum)
            except OSError:
                pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(signum, forward)
    try:
        main_pid = os.posix_spawn(command[0], command, os.environ, setsid=True)
    except OSError as error:
        status.write(f"error {error.strerror or error}: {command[0]}\n")
        status.close()
        return 128
    status.write(f"started {main_pid}\n")
    status.close()
    code = 0
    while True:
        pid, wait_status = os.waitpid(-1, 0)  # the main process, or an orphan reparented here
        if pid == main_pid:
            code = os.waitstatus_to_exitcode(wait_status)
            break
    end_all(main_pid)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
