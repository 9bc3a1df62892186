"""A private Docker engine for the docker tier, and the local images it runs.

`start_daemon` starts Debian's `dockerd` as this (root) user with everything of its own
under one temporary directory: the API socket, the data root, the exec root (its
containerd lives there), the pid file and an empty daemon config, so the host's docker
set-up is neither read nor touched. This machine's sandbox has no bridge networking
(`--bridge=none`, no iptables): containers use the host's network.

`build_base_image` makes a small image without any registry: a Debian root file system
from debootstrap (Python 3 and patch), with servekit and its dependencies installed
from this checkout by pip (`--target`), imported with `docker import`. `servekit sim
serve` in it stands in for the engine (`ENGINE_ENTRYPOINT`).

`stop_daemon` removes every container and image of the private daemon, stops it and
unmounts anything left under its directory; `leftovers` lists what would still be there.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).with_name("vllm_standin.py")
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("SERVEKIT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
START_TIMEOUT_S = 60.0
INSTALL_HINT = (
    "install it with: bash scripts/bootstrap --with-engine (Debian docker.io, debootstrap)"
)
ENGINE_ENTRYPOINT = "/usr/local/bin/vllm-standin"
"""Where the base image keeps the engine stand-in; its ENTRYPOINT, like vllm-openai's
`vllm serve`, takes the model path and vLLM's flags."""


IMAGE_PATH = "/opt/servekit/lib/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class DockerTierError(AssertionError):
    """The tier's own set-up failed (missing tool, daemon that does not start)."""


@dataclass
class Daemon:
    """A running private dockerd.

    Attributes:
        root: the directory that holds everything of it.
        host: its DOCKER_HOST (a unix socket under `root`).
        proc: the dockerd process.
        container_pids: the host pids of the containers' main processes, as seen when
            the daemon was stopped (a container's process does not name the directory).
    """

    root: Path
    host: str
    proc: subprocess.Popen[bytes]
    container_pids: set[int] = field(default_factory=set)

    @property
    def log(self) -> Path:
        """dockerd's own log."""
        return self.root / "dockerd.log"

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment pointed at the private daemon."""
        return {**os.environ, "DOCKER_HOST": self.host, **extra}

    def cli(self, *args: str, check: bool = True, timeout_s: float = 120.0) -> str:
        """Run `docker ARGS` against the daemon; returns stdout.

        Raises:
            DockerTierError: with `check`, docker exited non-zero (its stderr is quoted).
        """
        result = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout_s,
            env=self.env(), check=False,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise DockerTierError(f"docker {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def containers(self) -> list[str]:
        """Ids of every container the daemon has, running or not."""
        return self.cli("ps", "-aq", "--no-trunc").split()

    def images(self) -> list[str]:
        """Ids of every image the daemon has."""
        return sorted(set(self.cli("images", "-aq", "--no-trunc").split()))


def require(tool: str) -> str:
    """The path of a tool the tier needs.

    Raises:
        DockerTierError: it is missing (the message says how to install it).
    """
    path = shutil.which(tool)
    if path is None:
        raise DockerTierError(f"the docker tier needs {tool}, which is not on PATH; {INSTALL_HINT}")
    return path


def start_daemon() -> Daemon:
    """Start a private dockerd and wait until it answers.

    Raises:
        DockerTierError: dockerd is missing, this is not root, or it did not answer in
            START_TIMEOUT_S (its log's tail is quoted).
    """
    dockerd = require("dockerd")
    require("docker")
    if os.geteuid() != 0:
        raise DockerTierError("the docker tier starts its own dockerd, which needs root")
    # A short path: unix socket paths (containerd's among them) are limited to 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="sk-docker-", dir="/tmp"))
    (root / "daemon.json").write_text("{}\n", encoding="utf-8")
    host = f"unix://{root}/docker.sock"
    # containerd namespaces take letters, digits, '-' and '.', and mkdtemp's names hold '_'.
    namespace = f"sk-docker-{secrets.token_hex(6)}"
    argv = [
        dockerd, "--host", host, "--data-root", str(root / "data"),
        "--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid"),
        "--config-file", str(root / "daemon.json"),
        "--containerd-namespace", namespace,
        "--containerd-plugins-namespace", f"{namespace}-plugins",
        "--iptables=false", "--ip-forward=false", "--ip-masq=false", "--bridge=none",
    ]  # fmt: skip
    with (root / "dockerd.log").open("wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    daemon = Daemon(root, host, proc)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        version = ["docker", "version", "--format", "{{.Server.Version}}"]
        answer = subprocess.run(version, capture_output=True, env=daemon.env(), check=False,
                                timeout=30)  # fmt: skip
        if answer.returncode == 0:
            return daemon
        time.sleep(0.3)
    tail = daemon.log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
    stop_daemon(daemon)
    raise DockerTierError("the private dockerd did not start:\n" + "\n".join(tail))


def stop_daemon(daemon: Daemon) -> None:
    """Remove every container and image of the daemon, stop it, unmount and delete its
    directory. Safe to call twice."""
    if daemon.proc.poll() is None:
        with contextlib.suppress(DockerTierError, subprocess.TimeoutExpired):
            ids = daemon.containers()
            if ids:
                pids = daemon.cli("inspect", "-f", "{{.State.Pid}}", *ids, check=False)
                daemon.container_pids |= {int(pid) for pid in pids.split() if pid.isdigit()}
                daemon.container_pids.discard(0)  # not running
                daemon.cli("rm", "-f", "-v", *ids, check=False)
            images = daemon.images()
            if images:
                daemon.cli("rmi", "-f", *images, check=False)
        daemon.proc.send_signal(signal.SIGTERM)
        try:
            daemon.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.proc.kill()
            daemon.proc.wait(timeout=10)
    for process in _processes_under(daemon.root):
        with contextlib.suppress(psutil.Error):
            process.kill()
    for mount in reversed(_mounts_under(daemon.root)):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
    shutil.rmtree(daemon.root, ignore_errors=True)


def leftovers(daemon: Daemon) -> list[str]:
    """What of the daemon is still there: processes, mounts, its directory."""
    found = [
        f"process {p.pid}: {' '.join(p.cmdline())[:120]}" for p in _processes_under(daemon.root)
    ]
    found += [f"mount {mount}" for mount in _mounts_under(daemon.root)]
    found += [f"container process {pid}" for pid in sorted(daemon.container_pids)
              if _alive(pid)]  # fmt: skip
    if daemon.proc.poll() is None:
        found.append(f"dockerd {daemon.proc.pid} still runs")
    if daemon.root.exists():
        found.append(f"directory {daemon.root}")
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _processes_under(root: Path) -> list[psutil.Process]:
    """Processes whose command line names the daemon's directory (dockerd, containerd,
    shims)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if any(str(root) in word for word in process.cmdline()):
                found.append(process)
    return found


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or under `root`, from this process's mount table."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(f"{root}/"):
            mounts.append(point)
    return mounts


def build_base_image(daemon: Daemon, tag: str, work: Path) -> str:
    """Build the tier's base image (see the module docstring); returns `tag`.

    Raises:
        DockerTierError: debootstrap or pip failed (their output's tail is quoted).
    """
    require("debootstrap")
    rootfs = work / "rootfs"
    _run(["debootstrap", "--variant=minbase", "--include=python3,patch", DEBIAN_SUITE,
          str(rootfs), DEBIAN_MIRROR], what="debootstrap", timeout_s=600)  # fmt: skip
    lib = rootfs / "opt" / "servekit" / "lib"
    _run([sys.executable, "-m", "pip", "install", "--quiet",
          "--disable-pip-version-check", "--no-compile", "--target", str(lib), str(ROOT)],
         what="pip install servekit into the image", timeout_s=900)  # fmt: skip
    shutil.copy(STANDIN, rootfs / ENGINE_ENTRYPOINT.lstrip("/"))
    (rootfs / ENGINE_ENTRYPOINT.lstrip("/")).chmod(0o755)
    with subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE) as tar:
        imported = subprocess.run(
            ["docker", "import",
             "--change", "ENV PYTHONPATH=/opt/servekit/lib",
             "--change", f"ENV PATH={IMAGE_PATH}",
             "--change", f'ENTRYPOINT ["python3", "{ENGINE_ENTRYPOINT}"]',
             "-", tag],
            stdin=tar.stdout, capture_output=True, text=True, env=daemon.env(), check=False,
            timeout=300,
        )  # fmt: skip
    if imported.returncode != 0:
        raise DockerTierError(f"docker import failed: {imported.stderr.strip()}")
    shutil.rmtree(rootfs, ignore_errors=True)
    return tag


def build_sleeper_image(daemon: Daemon, tag: str, work: Path) -> str:
    """Build a tiny image (the host's `sh` and `sleep` with their libraries) whose
    entrypoint ignores its arguments and sleeps for ten minutes; returns `tag`.

    It stands in for an engine container where only its being there matters (a daemon
    stopped under it), in seconds where copying the base image to another daemon takes
    a minute.

    Raises:
        DockerTierError: a tool is missing or `docker import` failed.
    """
    rootfs = work / "sleeper-rootfs"
    for tool in ("sh", "sleep"):
        binary = Path(require(tool)).resolve()
        for path in [binary, *_shared_libraries(binary)]:
            target = rootfs / path.relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        (rootfs / "bin").mkdir(parents=True, exist_ok=True)
        link = rootfs / "bin" / tool
        if not link.exists():
            link.symlink_to(binary)
    with subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE) as tar:
        imported = subprocess.run(
            ["docker", "import", "--change", 'ENTRYPOINT ["/bin/sh", "-c", "exec sleep 600"]',
             "-", tag],
            stdin=tar.stdout, capture_output=True, text=True, env=daemon.env(), check=False,
            timeout=120,
        )  # fmt: skip
    shutil.rmtree(rootfs, ignore_errors=True)
    if imported.returncode != 0:
        raise DockerTierError(f"docker import failed: {imported.stderr.strip()}")
    return tag


def _shared_libraries(binary: Path) -> list[Path]:
    """The shared libraries (and loader) a host binary needs, from `ldd`."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    found = []
    for line in out.stdout.splitlines():
        words = [word for word in line.split() if word.startswith("/")]
        if words:
            found.append(Path(words[0]))
    return found


def _run(argv: list[str], *, what: str, timeout_s: float) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-15:]
        raise DockerTierError(f"{what} failed (exit {result.returncode}):\n" + "\n".join(tail))
