"""Local directories: made, measured, grown, removed; with ``image`` enforcement (where this
machine allows loop mounts) the kernel refuses writes past the size. NFS exports: what the
provider is told to apply."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuaas.backends.storage.local import IMAGE, MEASURE, LocalDirectories, image_possible
from gpuaas.backends.storage.nfs import NfsExports
from gpuaas.model.cluster import AccessMode, VolumeSpec
from gpuaas.model.volume import Volume, VolumeCode, VolumeState, mount_link, volume_env_name

MI = 1 << 20


def vol(name: str = "data", size: int = MI, mode: AccessMode = AccessMode.RWO) -> Volume:
    return Volume("acme", VolumeSpec(name, size, "local", mode))


def test_a_measured_directory_is_made_measured_full_and_removed(tmp_path: Path) -> None:
    dirs = LocalDirectories(tmp_path, MEASURE)
    v = vol(size=64 << 10)
    made = dirs.provision(v)
    assert made.state is VolumeState.READY and made.reason.code is VolumeCode.PROVISIONED
    path = Path(made.path)
    assert path == tmp_path / "acme" / "data" and path.is_dir()
    assert dirs.provision(v).path == made.path  # idempotent
    (path / "sub").mkdir()
    (path / "sub" / "f").write_bytes(b"x" * (32 << 10))
    (path / "link").symlink_to("/usr")  # not followed
    used = dirs.usage(v)
    assert used is not None and 32 << 10 <= used < 1 * MI
    assert dirs.observe(v, made).reason.code is VolumeCode.PROVISIONED
    (path / "g").write_bytes(b"x" * (64 << 10))
    full = dirs.observe(v, made)
    assert full.state is VolumeState.READY and full.reason.code is VolumeCode.FULL
    assert "read-write mounts are refused" in full.reason.render()
    (path / "g").unlink()
    assert dirs.observe(v, full).reason.code is VolumeCode.PROVISIONED
    dirs.delete(v)
    dirs.delete(v)  # already gone
    assert not path.exists()


needs_loop = pytest.mark.skipif(
    not image_possible() or not Path("/dev/loop-control").exists(),
    reason="image enforcement needs root, mkfs.ext4, mount and loop devices",
)


@needs_loop
def test_an_image_volume_refuses_writes_past_its_size_and_grows(tmp_path: Path) -> None:
    dirs = LocalDirectories(tmp_path, IMAGE)
    v = vol(size=8 * MI)
    try:
        try:
            made = dirs.provision(v)
        except Exception as exc:  # a container without loop devices after all
            pytest.skip(f"loop mount not possible here: {exc}")
        path = Path(made.path)
        assert os.path.ismount(path) and made.details["enforcement"] == IMAGE
        assert dirs.image(v).stat().st_size == 8 * MI
        with pytest.raises(OSError) as full, (path / "big").open("wb") as f:
            for _ in range(16):
                f.write(b"x" * MI)
                f.flush()
                os.fsync(f.fileno())
        assert full.value.errno == errno.ENOSPC
        written = (path / "big").stat().st_size
        assert written <= 8 * MI
        (path / "big").unlink()
        bigger = vol(size=16 * MI)
        dirs.provision(bigger)  # grown online
        assert dirs.image(v).stat().st_size == 16 * MI
        total = os.statvfs(path).f_blocks * os.statvfs(path).f_frsize
        assert 8 * MI < total <= 16 * MI
        used = dirs.usage(bigger)
        assert used is not None and used < total
    finally:
        if os.path.ismount(tmp_path / "acme" / "data"):
            subprocess.run(["umount", str(tmp_path / "acme" / "data")], check=False)
        dirs.delete(v)
    assert not (tmp_path / "acme" / "data").exists() and not dirs.image(v).exists()


def test_nfs_exports_are_described_not_invented() -> None:
    nfs = NfsExports("nfs.example.org", "/exports/gpuaas/", "10.0.0.0/16", "/mnt/gpuaas")
    made = nfs.provision(vol("shared", 5 * MI, AccessMode.RWX))
    assert made.state is VolumeState.READY and made.reason.code is VolumeCode.EXPORT_DESCRIBED
    assert made.path == "/mnt/gpuaas/acme/shared"
    d = made.details
    assert d["exportLine"] == (
        "/exports/gpuaas/acme/shared 10.0.0.0/16(rw,sync,no_subtree_check,root_squash)"
    )
    assert d["fstabLine"] == (
        "nfs.example.org:/exports/gpuaas/acme/shared /mnt/gpuaas/acme/shared nfs "
        "vers=4.2,hard,proto=tcp,timeo=600,retrans=2 0 0"
    )
    assert "removes none of this" in d["provider"] and str(5 * MI) in d["provider"]
    ro = nfs.describe(vol("ref", MI, AccessMode.ROX))
    assert "(ro," in ro["exportLine"]
    assert nfs.usage(vol()) is None


def test_mount_links_and_variable_names() -> None:
    assert mount_link("/data") == "data"
    assert mount_link("/mnt//in/./x/") == "mnt/in/x"
    for bad in ("/", "/a/../b", "/.."):
        with pytest.raises(ValueError):
            mount_link(bad)
    assert volume_env_name("my-results") == "GPUAAS_VOLUME_MY_RESULTS"


def test_the_slurm_task_exports_and_links_each_volume(tmp_path: Path) -> None:
    from gpuaas.backends.base import BackendJob
    from gpuaas.backends.logs import LogLayout
    from gpuaas.backends.slurm.script import SlurmNode, Unrunnable, submission
    from gpuaas.model.placement import PodPlacement

    mounts = [{"name": "res", "mountPath": "/out/x", "readOnly": False, "path": "/shared/v/res",
               "claim": ""}]  # fmt: skip
    spec = {"command": ["true"], "resolved": {"volumes": mounts}}
    pod = PodPlacement("main", 0, 0, "n1", 1000, MI, ())
    nodes = {"n1": SlurmNode("n1", "10.0.0.1", ("batch",))}
    job = BackendJob(3, "j", spec, (pod,), None, 0, "acme")
    task = submission(job, LogLayout(tmp_path), nodes).task
    assert "export GPUAAS_VOLUME_RES=/shared/v/res" in task
    assert "mkdir -p out" in task and "ln -sn /shared/v/res out/x" in task
    assert task.index("ln -sn") > task.index("cd ")
    claim = [{**mounts[0], "path": "", "claim": "res"}]
    with pytest.raises(Unrunnable, match="no directory"):
        submission(BackendJob(3, "j", {**spec, "resolved": {"volumes": claim}}, (pod,)),
                   LogLayout(tmp_path), nodes)  # fmt: skip


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
def test_local_processes_see_the_volume_at_its_mount_path(tmp_path: Path) -> None:
    from gpuaas.backends.local import commands

    volume = tmp_path / "v"
    volume.mkdir()
    mounts = [{"name": "v", "mountPath": "/in", "readOnly": True, "path": str(volume)}]
    spec = {"resolved": {"volumes": mounts}}
    pod_dir = tmp_path / "pod"
    pod_dir.mkdir()
    commands.link_volumes(spec, pod_dir)
    assert (pod_dir / "in").resolve() == volume.resolve()
    assert commands.volume_variables(spec, inside=False) == {"GPUAAS_VOLUME_V": str(volume)}
    assert commands.volume_variables(spec, inside=True) == {"GPUAAS_VOLUME_V": "/in"}
    gone = [{**mounts[0], "path": str(tmp_path / "missing")}]
    with pytest.raises(commands.CannotRun, match="not available on this host"):
        commands.volume_mounts({"resolved": {"volumes": gone}})
