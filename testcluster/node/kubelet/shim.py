"""The simulated container runtime's shim: runs one container, or one exec into it.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import select
import signal
import stat
import sys
import termios
import time

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER, CLONE_NEWUTS = 0x00020000, 0x20000000, 0x10000000, 0x04000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_MOVE, MS_REC = 1024, 2048, 4096, 8192, 16384
MS_PRIVATE, MS_RELATIME = 1 << 18, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGWINCH)
NAMESPACED = ("namespaces", "userns")

_libc = ctypes.CDLL(None, use_errno=True)


class RuntimeError_(Exception):
    """A failure the kubelet reports as the runtime's (``stage``: mount or exec)."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _b(s: str | None) -> bytes | None:
    return None if s is None else os.fsencode(s)


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(0)), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data)), f"mount {target}")


def sethostname(name: str) -> None:
    raw = name.encode()[:64]
    _check(_libc.sethostname(raw, ctypes.c_size_t(len(raw))), "sethostname")


def umount_detach(target: str) -> None:
    _check(_libc.umount2(_b(target), ctypes.c_int(MNT_DETACH)), f"umount {target}")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), "prctl")


def die_with_parent(parent: int | None) -> None:
    """SIGKILL when the parent goes; if it already went, go now (``parent`` None: the parent is
    outside this PID namespace, where ``getppid()`` reads 0 and cannot tell)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent is not None and os.getppid() != parent:
        os._exit(137)


# -- mount points ------------------------------------------------------------------


def _under(path: str, top: str) -> bool:
    return path != top and (top == "/" or path.startswith(top.rstrip("/") + "/"))


def _locked_flags(path: str) -> int:
    """The flags a read-only remount must keep (a user namespace may not drop them)."""
    f = os.statvfs(path).f_flag
    flags = 0
    for st, ms in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                   (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (4096, MS_RELATIME)):
        if f & st:
            flags |= ms
    return flags


class Rootfs:
    """The container's view of the files, built inside its private mount namespace.

    It is the machine's own tree.  Where a mount point or the working directory is missing, the
    nearest existing directory is *shadowed*: a directory on ``scratch`` (a tmpfs of this
    namespace) gets a bind of each of its entries (symbolic links copied) and is bound in its
    place, so the new entry exists for this container only and the machine's files never change
    (bubblewrap builds its roots the same way; an overlay would not do: overlayfs refuses a lower
    layer with locked submounts, as ``/`` is inside a user namespace).  When that directory is ``/``
    itself, the shadow becomes the container's new root (``chroot`` at the end).
    """

    def __init__(self, scratch: str):
        self.scratch = scratch
        self.root = "/"
        self._n = 0
        # filesystems of this namespace only: a new entry there needs no shadow
        self.private = {os.stat(scratch).st_dev}

    def path(self, p: str) -> str:
        return p if self.root == "/" else os.path.join(self.root, p.lstrip("/"))

    def ensure(self, target: str, is_dir: bool) -> str:
        real = self.path(target)
        if os.path.exists(real):
            if os.path.isdir(real) != is_dir:
                code = errno.ENOTDIR if is_dir else errno.EISDIR
                raise OSError(code, os.strerror(code))
            return real
        anc = os.path.dirname(target.rstrip("/")) or "/"
        while not os.path.isdir(self.path(anc)):
            anc = os.path.dirname(anc) or "/"
        if os.stat(self.path(anc)).st_dev not in self.private:
            self._shadow(anc)
        real = self.path(target)
        if is_dir:
            os.makedirs(real, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(real), exist_ok=True)
            open(real, "a").close()
        return real

    def reach(self, path: str) -> None:
        """Every directory above ``path`` that others may not enter (a Python under ``/root``)
        shadowed with the search bits added: the image's files are readable to the image's user,
        as in a real image; what each entry holds keeps its own mode."""
        parts = [p for p in os.path.realpath(path).split("/") if p]
        for i in range(1, len(parts)):
            d = "/" + "/".join(parts[:i])
            real = self.path(d)
            if os.path.isdir(real) and not os.stat(real).st_mode & 0o001:
                self._shadow(d, 0o111)

    def _shadow(self, anc: str, add_mode: int = 0) -> None:
        self._n += 1
        new = os.path.join(self.scratch, f"dir{self._n}")
        src = self.path(anc)
        mode = stat.S_IMODE(os.stat(src).st_mode)
        os.mkdir(new, mode)
        if add_mode:
            os.chmod(new, mode | add_mode)
        for name in os.listdir(src):
            s, d = os.path.join(src, name), os.path.join(new, name)
            try:
                if os.path.islink(s):
                    os.symlink(os.readlink(s), d)
                    continue
                if os.path.isdir(s):
                    os.mkdir(d)
                else:
                    open(d, "a").close()
            except FileNotFoundError:
                continue  # gone meanwhile
            mount(s, d, None, MS_BIND | MS_REC)
        inner = os.path.join(new, os.path.relpath(self.scratch, src)) if _under(self.scratch, src) else None
        if inner and os.path.ismount(inner):
            umount_detach(inner)  # the copy of scratch that binding its parent brought in
        if src == "/":
            self.root = new
        else:
            mount(new, src, None, MS_BIND | MS_REC)

    def bind(self, source: str, target: str, read_only: bool, shown: str | None = None) -> None:
        """Bind ``source`` (``shown`` in errors: the path the kubelet gave) at ``target``."""
        try:
            is_dir = os.path.isdir(source)
            real = self.ensure(target, is_dir)
            mount(source, real, None, MS_BIND | MS_REC)
            if read_only:
                mount(None, real, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _locked_flags(real))
        except OSError as e:
            raise RuntimeError_("mount", f'error mounting "{shown or source}" to rootfs at "{target}": '
                                         f"{e.strerror or e}") from None

    def enter(self) -> None:
        if self.root != "/":
            os.chroot(self.root)
            os.chdir("/")


def _hold(paths: set[str]) -> dict[str, int]:
    """``O_PATH`` descriptors: the paths stay reachable (``/proc/self/fd/N``) once hidden."""
    return {p: os.open(p, os.O_PATH) for p in paths if os.path.lexists(p)}


def setup_mounts(cfg: dict) -> None:
    """In the new mount namespace: a private tree, a /tmp of the container's own, the paths the
    kubelet shares, the volumes, the working directory, /proc."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    shared, mounts = cfg.get("shared") or [], cfg.get("mounts") or []
    held = _hold({*shared, *(m["source"] for m in mounts)})
    via = {p: f"/proc/self/fd/{fd}" for p, fd in held.items()}
    private_tmp = bool(cfg.get("privateTmp")) and os.path.isdir("/tmp") and not os.path.islink("/tmp")
    if private_tmp:
        # a container's /tmp is its own, empty at start (the image's)
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for p in shared:
        os.makedirs(p, exist_ok=True)
        mount(via.get(p, p), p, None, MS_BIND | MS_REC)  # a mount point of its own: shadows keep it
    scratch = cfg["scratch"]
    os.makedirs(scratch, exist_ok=True)
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    rootfs = Rootfs(scratch)
    if private_tmp:
        rootfs.private.add(os.stat("/tmp").st_dev)
    for m in sorted(mounts, key=lambda m: m["target"].rstrip("/").count("/")):
        rootfs.bind(via.get(m["source"], m["source"]), m["target"], bool(m.get("readOnly")), m["source"])
    for fd in held.values():
        os.close(fd)
    if cfg.get("user"):  # the image's directories and the kubelet's, reachable to the user
        for p in [*(cfg["user"].get("reach") or []), *shared]:
            rootfs.reach(p)
    cwd = cfg.get("cwd") or "/"
    try:
        rootfs.ensure(cwd, True)
    except OSError as e:
        raise RuntimeError_("mount", f'chdir to cwd ("{cwd}") set in config.json failed: {e.strerror or e}') \
            from None
    rootfs.enter()
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


# -- the command -------------------------------------------------------------------


def _lookup(argv0: str, env: dict) -> str:
    """runc's lookup of the executable, with its wording."""
    if "/" in argv0:
        try:
            st = os.stat(argv0)
        except OSError as e:
            raise RuntimeError_("exec", f'exec: "{argv0}": stat {argv0}: {e.strerror}') from None
        if stat.S_ISDIR(st.st_mode) or not os.access(argv0, os.X_OK):
            raise RuntimeError_("exec", f'exec: "{argv0}": permission denied')
        return argv0
    for d in (env.get("PATH") or os.defpath).split(os.pathsep):
        cand = os.path.join(d or ".", argv0)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise RuntimeError_("exec", f'exec: "{argv0}": executable file not found in $PATH')


def report(status_fd: int, event: dict) -> None:
    with open(status_fd, "w", closefd=False) as f:
        f.write(json.dumps(event) + "\n")


def keep_priority() -> None:
    """A new session is a new scheduling group of its own (Linux's autogroup), weighted as nice 0
    whatever the niceness of its processes: give it this process's niceness, so that a container's
    processes get the CPU share of the kubelet that started them.  Before the user switch (a
    negative value needs CAP_SYS_NICE); nothing to do where the kernel has no autogroups."""
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    for _ in range(15 if nice else 0):
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(nice))
            return
        except OSError as e:
            if e.errno != errno.EAGAIN:
                return
            # without CAP_SYS_ADMIN (a user namespace) the kernel takes one change per 100 ms
            time.sleep(0.02)


def exec_command(cfg: dict, status_fd: int) -> None:
    """In the forked child: a session of its own (the controlling tty when it has one) at the
    kubelet's CPU priority, the working directory, then ``execve``; a failure goes to the status pipe."""
    try:
        os.setsid()
        keep_priority()
        if cfg.get("tty"):
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        for sig in FORWARDED + (signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        user = cfg.get("user")
        if user:  # the securityContext's (or the image's) user and groups, as runc sets them
            try:
                os.setgroups(user["groups"])
                os.setgid(user["gid"])
                os.setuid(user["uid"])
            except OSError as e:
                raise RuntimeError_("exec", f'setting user {user["uid"]}:{user["gid"]}: {e.strerror}') from None
        cwd = cfg.get("cwd") or "/"
        try:
            os.chdir(cwd)
        except OSError as e:
            raise RuntimeError_("exec", f'chdir to cwd ("{cwd}") set in config.json failed: {e.strerror}') \
                from None
        argv, env = cfg["argv"], cfg["env"]
        path = _lookup(argv[0], env)
        os.execve(path, argv, env)
    except RuntimeError_ as e:
        report(status_fd, {"error": str(e), "stage": e.stage})
    except OSError as e:
        report(status_fd, {"error": f'exec: "{cfg["argv"][0]}": {e.strerror or e}', "stage": "exec"})
    except BaseException as e:  # never return into the parent's code
        report(status_fd, {"error": f"exec: {e}", "stage": "exec"})
    os._exit(127)


def _code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


# -- supervision -------------------------------------------------------------------


def _descendants(root: int) -> list[int]:
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
                parent[int(name)] = int(data[data.rindex(b")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.extend(kids)
        todo.extend(kids)
    return out


def kill_tree() -> None:
    """SIGKILL every descendant (orphans re-parented to this subreaper included) and reap them."""
    for _ in range(100):
        pids = _descendants(os.getpid())
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass


class Supervisor:
    """The shim's loop: forwards signals to ``child``, obeys the control pipe, waits for ``child``."""

    def __init__(self, child: int, control_fd: int | None, group: bool, subreaper: bool):
        self.child, self.control_fd, self.group, self.subreaper = child, control_fd, group, subreaper
        r, w = os.pipe()
        os.set_blocking(w, False)
        self.wake = r
        signal.set_wakeup_fd(w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in FORWARDED:
            signal.signal(sig, self._forward)

    def _forward(self, sig: int, _frame: object) -> None:
        try:
            if self.group:
                os.killpg(self.child, sig)
            else:
                os.kill(self.child, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _reaped(self) -> int | None:
        code = None
        try:
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid == self.child:
                    code = _code(status)
        except ChildProcessError:
            pass
        return code

    def run(self) -> int:
        while True:
            code = self._reaped()
            if code is not None:
                if self.subreaper:
                    kill_tree()
                return code
            ready, _, _ = select.select([self.wake] + ([self.control_fd] if self.control_fd is not None else []),
                                        [], [])
            if self.wake in ready:
                os.read(self.wake, 512)
            if self.control_fd in ready:
                line = os.read(self.control_fd, 512)
                if not line or b"kill" in line:
                    return self._kill()

    def _kill(self) -> int:
        try:
            os.kill(self.child, signal.SIGKILL)  # PID 1 of a namespace: takes the namespace with it
        except ProcessLookupError:
            pass
        if self.subreaper:
            kill_tree()
        try:
            os.waitpid(self.child, 0)
        except ChildProcessError:
            pass
        return 137


def run_init(cfg: dict, status_fd: int) -> None:
    """PID 1 of the container (namespaced modes): mounts, the command as PID 2, forwarding, reaping."""
    die_with_parent(None)
    try:
        setup_mounts(cfg)
    except RuntimeError_ as e:
        report(status_fd, {"error": str(e), "stage": e.stage})
        os._exit(128)
    except OSError as e:
        report(status_fd, {"error": f"error during container init: {e.strerror or e}", "stage": "mount"})
        os._exit(128)
    child = os.fork()
    if child == 0:
        exec_command(cfg, status_fd)
    os.close(status_fd)
    # PID 1 answers to the shim through signals only; its exit takes the namespace with it
    os._exit(Supervisor(child, None, group=True, subreaper=False).run())


def _unshare(isolation: str) -> None:
    """The container's namespaces; in a user namespace of its own, mapped to one's own ids
    (read before: once unshared, unmapped ids read as the overflow id 65534)."""
    uid, gid = os.geteuid(), os.getegid()
    unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | (CLONE_NEWUSER if isolation == "userns" else 0))
    if isolation == "userns":
        _userns_maps(uid, gid)


def _userns_maps(uid: int, gid: int) -> None:
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def run(cfg: dict, status_fd: int, control_fd: int) -> int:
    isolation = cfg.get("isolation", "processes")
    if isolation in NAMESPACED:
        _unshare(isolation)
        if cfg.get("hostname"):
            sethostname(cfg["hostname"])  # a pod's hostname is its name
        child = os.fork()
        if child == 0:
            run_init(cfg, status_fd)
        report(status_fd, {"init": child})
        os.close(status_fd)
        return Supervisor(child, control_fd, group=False, subreaper=False).run()
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    child = os.fork()
    if child == 0:
        exec_command(cfg, status_fd)
    report(status_fd, {"init": child})
    os.close(status_fd)
    return Supervisor(child, control_fd, group=True, subreaper=True).run()


def exec_in(cfg: dict, status_fd: int, control_fd: int) -> int:
    """``kubectl exec``: join the container (its init's namespaces and root), then run."""
    target = cfg.get("target")
    isolation = cfg.get("isolation", "processes")
    if isolation in NAMESPACED:
        # open everything first: once in its mount namespace, /proc is the container's
        root = os.open(f"/proc/{target}/root", os.O_RDONLY | os.O_DIRECTORY)
        fds = [os.open(f"/proc/{target}/ns/{ns}", os.O_RDONLY)
               for ns in (["user"] if isolation == "userns" else []) + ["uts", "mnt", "pid"]]
        for fd in fds:
            setns(fd)
            os.close(fd)
    else:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    child = os.fork()
    if child == 0:
        if isolation in NAMESPACED:
            os.fchdir(root)
            os.chroot(".")
        exec_command(cfg, status_fd)
    os.close(status_fd)
    return Supervisor(child, control_fd, group=True, subreaper=isolation not in NAMESPACED).run()


def check(isolation: str) -> int:
    """0 when this machine lets ``run`` isolate containers as ``isolation`` asks."""
    import shutil
    import tempfile

    base = tempfile.mkdtemp(prefix="gpuspawner-sim-check-")
    try:
        _unshare(isolation)
        child = os.fork()
        if child == 0:
            try:
                mount(None, "/", None, MS_REC | MS_PRIVATE)
                mount("tmpfs", base, "tmpfs", 0, "mode=0700")
                for d in ("lower", "merged"):
                    os.mkdir(os.path.join(base, d))
                mount(f"{base}/lower", f"{base}/merged", None, MS_BIND | MS_REC)
                mount(None, f"{base}/merged", None, MS_BIND | MS_REMOUNT | MS_RDONLY | _locked_flags(base))
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                os._exit(0)
            except OSError as e:
                print(e, file=sys.stderr)
                os._exit(1)
        _, status = os.waitpid(child, 0)
        return _code(status)
    finally:
        try:
            umount_detach(base)
        except OSError:
            pass
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str]) -> int:
    mode = argv[1]
    if mode == "check":
        try:
            return check(argv[2])
        except OSError as e:
            print(e, file=sys.stderr)
            return 1
    path, status_fd, control_fd = argv[2], int(argv[3]), int(argv[4])
    for fd in (status_fd, control_fd):
        os.set_inheritable(fd, False)
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    os.unlink(path)
    if cfg.get("isolation") in NAMESPACED:
        # killed with the kubelet, PID 1 (and with it the namespace) follows; a subreaper shim
        # must live on to kill its tree, which the control pipe's end-of-file makes it do
        die_with_parent(int(argv[5]))
    try:
        return run(cfg, status_fd, control_fd) if mode == "run" else exec_in(cfg, status_fd, control_fd)
    except OSError as e:
        report(status_fd, {"error": f"error during container init: {e.strerror or e}", "stage": "mount"})
        return 128


if __name__ == "__main__":
    sys.exit(main(sys.argv))
