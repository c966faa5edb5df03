"""A real Slurm cluster on this machine for the tests and the benchmark: munged, slurmctld,
several slurmd with fake GPUs (symlinks to /dev/null) and slurmrestd on a unix socket.

Everything lives under one base folder (its own munge socket, ports picked free below the
ephemeral range), so two test sessions on one machine do not collide, and everything is
stopped by the pids it wrote. See ``../shared/recipes/slurm-local.md`` for why each line of
the configuration is there. Run by hand for the benchmark::

    python tests/backends/slurm/slurm_cluster.py up /tmp/gpuaas-slurm 4 64 64  # nodes cpus gpus
    python tests/backends/slurm/slurm_cluster.py down /tmp/gpuaas-slurm
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BINARIES = ("slurmctld", "slurmd", "slurmrestd", "sbatch", "squeue", "scontrol", "sinfo")
REST_USER = "slurmapi"
GPUS_PER_NODE = 8
CPUS_PER_NODE = 8
#: a count-only gres per node for RDMA NICs (the backend's nic_gres maps a NIC pool to it)
NICS = 4


def missing_binaries() -> list[str]:
    found = [b for b in BINARIES if shutil.which(b) or Path("/usr/sbin", b).exists()]
    missing = [b for b in BINARIES if b not in found]
    if not Path("/usr/sbin/munged").exists():
        missing.append("munged")
    return missing


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_ports(count: int, start: int = 20000, stop: int = 32000) -> int:
    """The first of ``count`` consecutive free ports (below the ephemeral range)."""
    port = start + (os.getpid() * 7) % 2000 * 5
    while port + count < stop:
        try:
            for p in range(port, port + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            port += count
    raise RuntimeError("no free ports for slurm")


@dataclass
class Cluster:
    base: Path
    nodes: int
    ctld_port: int = 0
    gpus: int = GPUS_PER_NODE  # fake GPUs per node (symlinks to /dev/null)
    cpus: int = CPUS_PER_NODE  # CPUs a node claims (config_overrides lets it claim more)

    @property
    def conf(self) -> Path:
        return self.base / "slurm.conf"

    @property
    def socket(self) -> Path:
        return self.base / "rest" / "slurmrestd.socket"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def write_config(self) -> None:
        base, n = self.base, self.nodes
        for sub in ("state", "spool", "run", "log", "dev", "rest", "jobs"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        for i in range(self.gpus):
            link = base / "dev" / f"nvidia{i}"
            if not link.is_symlink():
                link.symlink_to("/dev/null")
        (base / "jwt_hs256.key").write_bytes(os.urandom(32))
        (base / "jwt_hs256.key").chmod(0o600)
        self.ctld_port = _free_ports(n + 1)
        first = self.ctld_port + 1
        ports = f"[{first}-{first + n - 1}]" if n > 1 else str(first)
        self.conf.write_text(
            f"""ClusterName=ci
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={self.ctld_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={base}/munge/munge.socket
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={base}/jwt_hs256.key
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool/%n
SlurmctldPidFile={base}/run/slurmctld.pid
SlurmdPidFile={base}/run/slurmd-%n.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd-%n.log
DebugFlags=NO_CONF_HASH
CommunicationParameters=NoInAddrAny
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={base}/log/jobcomp.txt
MailProg=/bin/true
EnforcePartLimits=ALL
MinJobAge=300
MaxJobCount=20000
SlurmdTimeout=60
BatchStartTimeout=120
MessageTimeout=5
KillWait=2
GresTypes=gpu,nic
NodeName=n[1-{n}] NodeAddr=127.0.0.1 NodeHostname=localhost Port={ports} \\
  CPUs={self.cpus} RealMemory=16000 Gres=gpu:h100:{self.gpus},nic:{NICS} State=UNKNOWN
PartitionName=gpu Nodes=n[1-{n}] Default=YES MaxTime=INFINITE State=UP
PartitionName=closed Nodes=n[1-{n}] MaxTime=INFINITE State=DOWN
PartitionName=short Nodes=n[1-{n}] MaxTime=1 State=UP
"""
        )
        (base / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName=n[1-{n}] Name=gpu Type=h100 "
            f"File={base}/dev/nvidia[0-{self.gpus - 1}]\n"
            f"NodeName=n[1-{n}] Name=nic Count={NICS}\n"
        )

    def start(self, timeout: float = 30.0) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.base.chmod(0o755)
        self.write_config()
        munge = self.base / "munge"
        munge.mkdir(exist_ok=True)
        shutil.chown(munge, "munge", "munge")
        munge.chmod(0o755)
        subprocess.run(
            ["runuser", "-u", "munge", "--", _sbin("munged"), f"--socket={munge}/munge.socket",
             f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/munged.seed",
             f"--log-file={munge}/munged.log"],
            check=True,
        )  # fmt: skip
        env = self.env
        subprocess.run([_sbin("slurmctld"), "-i"], env=env, check=True)
        for name in self.node_names:
            subprocess.run([_sbin("slurmd"), "-N", name], env=env, check=True)
        self._start_rest()
        self.wait_idle(timeout)

    def _start_rest(self) -> None:
        try:
            pwd.getpwnam(REST_USER)
        except KeyError:
            subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", REST_USER], check=True)
        rest = self.base / "rest"
        shutil.chown(rest, REST_USER)
        log = open(self.base / "log" / "slurmrestd.log", "ab")  # noqa: SIM115
        process = subprocess.Popen(
            ["runuser", "-u", REST_USER, "--", _sbin("slurmrestd"), "-a", "rest_auth/local",
             "-s", "openapi/v0.0.38", f"unix:{self.socket}"],
            env=self.env, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        (self.base / "run" / "slurmrestd.pid").write_text(str(process.pid))

    def wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(
                ["sinfo", "-h", "-N", "-p", "gpu", "-t", "idle", "-o", "%N"],
                env=self.env, capture_output=True, text=True,
            )  # fmt: skip
            idle = set(out.stdout.split())
            if idle >= set(self.node_names) and self.socket.exists():
                return
            time.sleep(0.2)
        raise RuntimeError(f"slurm nodes not idle after {timeout}s; see {self.base}/log")

    def scontrol(self, *args: str) -> str:
        out = subprocess.run(
            ["scontrol", *args], env=self.env, capture_output=True, text=True, check=True
        )
        return out.stdout

    def resume(self, node: str, timeout: float = 15.0) -> None:
        """Bring ``node`` back. With ``ReturnToService=2`` a down node whose slurmd registers
        again comes back by itself, and Slurm then refuses ``resume`` ("Invalid node state"):
        that is back too."""
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(
                ["scontrol", "update", f"nodename={node}", "state=resume"],
                env=self.env, capture_output=True, text=True,
            )  # fmt: skip
            if done.returncode == 0 or "Invalid node state" in done.stderr:
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.3)
        if done.returncode != 0:
            raise RuntimeError(f"scontrol update nodename={node} state=resume: {done.stderr}")

    def _step_daemons(self) -> list[int]:
        """This cluster's slurmstepd processes (their environment names our slurm.conf),
        sent SIGKILL: they would outlive their slurmd."""
        mine = f"SLURM_CONF={self.conf}".encode() + b"\0"
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and mine in _environ(entry.name):
                try:
                    if b"slurmstepd" in (entry / "cmdline").read_bytes():
                        os.kill(int(entry.name), signal.SIGKILL)
                        found.append(int(entry.name))
                except OSError:
                    continue
        return found

    def stop(self, grace: float = 5.0) -> None:
        """Stop every daemon by the pid it wrote, all at once (each takes ~2 s to exit):
        SIGTERM, then SIGKILL after ``grace``; slurmrestd (stateless) by its process group."""
        run = self.base / "run"
        paths = [*sorted(run.glob("*.pid")), self.base / "munge" / "munged.pid"]
        alive: list[int] = self._step_daemons()  # jobs still running die with the cluster
        for path in paths:
            try:
                pid = int(path.read_text().strip())
                if path.name == "slurmrestd.pid":
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGTERM)
                    alive.append(pid)
            except (OSError, ValueError):
                pass
            path.unlink(missing_ok=True)
        deadline = time.monotonic() + grace
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in alive if _exists(pid)]
            time.sleep(0.05)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _environ(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str]) -> None:
    action, base = argv[0], Path(argv[1])
    given = [int(a) for a in argv[2:5]]
    nodes, cpus, gpus = given + [4, CPUS_PER_NODE, GPUS_PER_NODE][len(given) :]
    cluster = Cluster(base, nodes, gpus=gpus, cpus=cpus)
    if action == "up":
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf} GPUAAS_SLURM_SOCKET={cluster.socket}")
    else:
        cluster.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
