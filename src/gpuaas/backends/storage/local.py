"""Local directories: the embedded default storage class (``local``).

A volume is the directory ``<root>/<tenant>/<name>`` (``root``: ``<data dir>/volumes``). On the
Slurm backend the data dir is the file system the Slurm nodes already share for the jobs' logs,
so the same directory is seen on every node.

How the size is enforced, by ``enforcement``:

- ``image``: the directory is the mount point of an ext4 file system in a sparse image file of
  exactly the volume's size (``<root>/<tenant>/.images/<name>.img``, ``mkfs.ext4 -m 0``,
  ``mount -o loop``). The kernel refuses writes past it (ENOSPC), for every process, running or
  not; growing the volume grows the image and the file system (``resize2fs``, online). ext4's
  own metadata takes part of the size (a few per cent; more on volumes of a few MiB), so the
  space writable is somewhat *less* than the size, never more. Needs root (``mount``) and
  ``mkfs.ext4``; an image left unmounted (after a reboot) is mounted again by the next
  :meth:`LocalDirectories.provision` or :meth:`LocalDirectories.observe`.
- ``measure`` (the default: no privileges needed): a plain directory whose usage is measured
  (the allocated blocks of every file below it, symlinks not followed). Once usage reaches the
  size the volume is ``Full``: the service refuses new jobs that mount it read-write, and the
  local and Slurm backends refuse to start one. What is *not* enforced in this mode: a job
  already running keeps writing past the size (nothing stops a process mid-write without a
  quota in the kernel), so usage can exceed the size by what running jobs write.

``auto`` picks ``image`` when this process is root and ``mkfs.ext4`` and ``mount`` exist, else
``measure``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuaas.backends.provisioners.base import ProvisionError
from gpuaas.model.volume import LOCAL_CLASS, Realised, Volume, VolumeCode, VolumeReason, VolumeState

IMAGE = "image"
MEASURE = "measure"
AUTO = "auto"
ENFORCEMENTS = (IMAGE, MEASURE, AUTO)


def image_possible() -> bool:
    """Whether ``image`` enforcement can work here: root, ``mkfs.ext4`` and ``mount``."""
    return (
        hasattr(os, "geteuid")
        and os.geteuid() == 0
        and shutil.which("mkfs.ext4") is not None
        and shutil.which("mount") is not None
    )


def directory_usage(path: Path) -> int:
    """Bytes allocated to the files below ``path`` (st_blocks x 512; symlinks not followed)."""
    total = 0
    stack = [path]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return total


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise ProvisionError(f"{' '.join(argv[:2])} failed: {detail[-1] if detail else done}")


class LocalDirectories:
    """See the module docstring."""

    storage_class = LOCAL_CLASS

    def __init__(self, root: Path, enforcement: str = MEASURE) -> None:
        if enforcement not in ENFORCEMENTS:
            raise ValueError(f"enforcement must be one of {', '.join(ENFORCEMENTS)}")
        if enforcement == AUTO:
            enforcement = IMAGE if image_possible() else MEASURE
        self.root = Path(root)
        self.enforcement = enforcement

    def path(self, volume: Volume) -> Path:
        return self.root / volume.tenant / volume.name

    def image(self, volume: Volume) -> Path:
        return self.root / volume.tenant / ".images" / f"{volume.name}.img"

    # --- the protocol -----------------------------------------------------------------------

    def provision(self, volume: Volume) -> Realised:
        path = self.path(volume)
        try:
            path.mkdir(parents=True, exist_ok=True)
            if self.enforcement == IMAGE:
                self._provision_image(volume, path)
        except OSError as exc:
            raise ProvisionError(f"cannot make {path}: {exc.strerror or exc}") from None
        return self._ready(volume)

    def observe(self, volume: Volume, realised: Realised) -> Realised:
        if self.enforcement == IMAGE and self.image(volume).exists():
            with contextlib.suppress(ProvisionError, OSError):
                self._mount(volume, self.path(volume))
        used = self.usage(volume)
        if used is not None and used >= volume.size_bytes and self.enforcement == MEASURE:
            reason = VolumeReason(VolumeCode.FULL, {"used": used, "size": volume.size_bytes})
            return Realised(VolumeState.READY, reason, realised.path, details=realised.details)
        if realised.reason.code is VolumeCode.FULL:  # no longer full
            return self._ready(volume)
        return realised

    def usage(self, volume: Volume) -> int | None:
        path = self.path(volume)
        if self.enforcement == IMAGE and os.path.ismount(path):
            st = os.statvfs(path)
            return (st.f_blocks - st.f_bfree) * st.f_frsize
        return directory_usage(path) if path.exists() else None

    def delete(self, volume: Volume) -> None:
        path, image = self.path(volume), self.image(volume)
        if os.path.ismount(path):
            _run(["umount", str(path)])
        with contextlib.suppress(FileNotFoundError):
            image.unlink()
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():
            raise ProvisionError(f"could not remove {path}")

    def manifest(self, volume: Volume) -> Sequence[dict[str, Any]]:
        return [self._description(volume)]

    # --- details ------------------------------------------------------------------------------

    def _ready(self, volume: Volume) -> Realised:
        path = str(self.path(volume))
        reason = VolumeReason(
            VolumeCode.PROVISIONED, {"path": path, "enforcement": self._enforcement_words()}
        )
        return Realised(VolumeState.READY, reason, path, details=self._description(volume))

    def _enforcement_words(self) -> str:
        if self.enforcement == IMAGE:
            return "a loop-mounted ext4 image of that size"
        return "measured usage (no new read-write mounts once full)"

    def _description(self, volume: Volume) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "LocalDirectory",
            "path": str(self.path(volume)),
            "sizeBytes": volume.size_bytes,
            "enforcement": self.enforcement,
        }
        if self.enforcement == IMAGE:
            out["image"] = str(self.image(volume))
        return out

    def _provision_image(self, volume: Volume, path: Path) -> None:
        image = self.image(volume)
        image.parent.mkdir(parents=True, exist_ok=True)
        if not image.exists():
            with image.open("wb") as f:
                f.truncate(volume.size_bytes)
            try:
                _run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)])
            except ProvisionError:
                image.unlink(missing_ok=True)
                raise
        elif image.stat().st_size < volume.size_bytes:
            with image.open("r+b") as f:
                f.truncate(volume.size_bytes)
            self._grow(image, path)
        self._mount(volume, path)

    def _grow(self, image: Path, path: Path) -> None:
        """Grow the file system to the (already grown) image: online where the kernel lets
        this process (``resize2fs`` on the mounted loop device), else offline, which needs the
        volume unmounted: refused while a job holds it open."""
        if os.path.ismount(path):
            try:
                device = self._loop_device(image)
                _run(["losetup", "-c", device])
                _run(["resize2fs", device])
                return
            except ProvisionError:
                try:
                    _run(["umount", str(path)])
                except ProvisionError as exc:
                    raise ProvisionError(f"cannot grow while in use ({exc})") from None
        subprocess.run(["e2fsck", "-f", "-p", str(image)], capture_output=True, check=False)
        _run(["resize2fs", str(image)])

    def _mount(self, volume: Volume, path: Path) -> None:
        if not os.path.ismount(path):
            _run(["mount", "-o", "loop", str(self.image(volume)), str(path)])

    @staticmethod
    def _loop_device(image: Path) -> str:
        done = subprocess.run(
            ["losetup", "-j", str(image)], capture_output=True, text=True, check=False
        )
        line = done.stdout.strip().splitlines()
        if not line:
            raise ProvisionError(f"no loop device holds {image}")
        return line[0].split(":", 1)[0]
