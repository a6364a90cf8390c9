"""Start and stop a real one-node SLURM cluster on loopback (Debian slurm-wlm + munge) for tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

CONF = """ClusterName=cuveetest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def slurm_available() -> str | None:
    """None when the binaries are there and we are root, else why not."""
    missing = [b for b in ("slurmctld", "slurmd", "sbatch", "munged") if not shutil.which(b)]
    if missing:
        return f"missing {', '.join(missing)} (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the one-node test cluster runs its daemons as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _munge_ok() -> bool:
    r = subprocess.run("munge -n | unmunge", shell=True, capture_output=True)
    return r.returncode == 0


def _kill_pidfile(path: Path) -> None:
    if path.exists():
        try:
            os.kill(int(path.read_text().strip()), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass


@contextmanager
def one_node_cluster(workdir: Path, cpus: int | None = None):
    """Yields the SLURM_CONF path; sets SLURM_CONF in this process's environment while running."""
    d = Path(workdir)
    (d / "state").mkdir(parents=True, exist_ok=True)
    (d / "spool").mkdir(parents=True, exist_ok=True)
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text(CONF.format(host=host, d=d, ctld_port=_free_port(), d_port=_free_port(),
                                cpus=cpus or os.cpu_count() or 2, mem_mb=8000))
    started_munge = False
    if not _munge_ok():
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            subprocess.run(["mungekey", "--create", "--force"], check=False)
            if not key.exists():
                key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
            shutil.chown(key, "munge", "munge")
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["munged", "--force"], check=True)
        started_munge = True
        for _ in range(50):
            if _munge_ok():
                break
            time.sleep(0.1)
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        subprocess.run(["slurmctld", "-f", str(conf)], check=True)
        subprocess.run(["slurmd", "-f", str(conf)], check=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip() in ("idle", "mixed"):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"SLURM did not come up: {(d / 'slurmctld.log').read_text()[-2000:]}")
        yield conf
    finally:
        subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True)
        _kill_pidfile(d / "slurmd.pid")
        _kill_pidfile(d / "slurmctld.pid")
        # daemons do not always leave their pid files; match them by this cluster's config path
        subprocess.run(["pkill", "-f", f"slurm(ctld|d) -f {conf}"], capture_output=True)
        time.sleep(1)
        subprocess.run(["pkill", "-9", "-f", f"slurm(ctld|d) -f {conf}"], capture_output=True)
        if started_munge:  # and wait until it is gone: a cluster started next must not find a dying one alive
            subprocess.run(["pkill", "-x", "munged"], capture_output=True)
            deadline = time.time() + 20
            while time.time() < deadline and subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
                time.sleep(0.1)
            subprocess.run(["pkill", "-9", "-x", "munged"], capture_output=True)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
