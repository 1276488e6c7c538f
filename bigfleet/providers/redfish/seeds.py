"""Publishing a machine's NoCloud seed where the BMCs (or the PXE server) fetch it, and removing
it: the `cidata` ISO (virtual media) or the nocloud-net directory (pxe) under `media_dir`."""

from __future__ import annotations

import glob
import os
import pathlib
import re
import shutil

from .. import nocloud
from .config import RedfishConfig


def publish(config: RedfishConfig, machine_id: str, user_data: bytes, digest: str) -> str:
    """Write the machine's NoCloud seed where the BMCs (or the PXE server) fetch it: the
    `cidata` ISO's URL (virtual media), or the nocloud-net seed URL (pxe; its directory
    when there is no media_url)."""
    assert config.media_dir  # RedfishConfig._media
    directory = pathlib.Path(config.media_dir)
    directory.mkdir(parents=True, exist_ok=True)
    unpublish(config, machine_id)
    files = nocloud.seed_files(machine_id, user_data, digest)
    base = (config.media_url or "").rstrip("/")
    if config.boot_method == "pxe":
        seed = directory / machine_id
        seed.mkdir(mode=0o750)
        for name in ("user-data", "meta-data"):  # meta-data last: its instance-id is new
            write_private(seed / name, files[name])
        return f"{base}/{machine_id}/" if base else str(seed)
    name = f"{nocloud.instance_id(machine_id, digest)}.iso"
    write_private(directory / name, nocloud.cidata_iso(files))
    return f"{base}/{name}"


def unpublish(config: RedfishConfig, machine_id: str) -> None:
    """Remove the machine's seeds: its ISOs (and raw blobs of older versions, `.img`) and
    its nocloud-net directory; not those of a machine whose id merely starts with its id."""
    assert config.media_dir
    directory = pathlib.Path(config.media_dir)
    own = re.compile(re.escape(machine_id) + r"-[0-9a-f]{16}\.(iso|img)")
    for old in directory.glob(f"{glob.escape(machine_id)}-*"):
        if own.fullmatch(old.name):
            old.unlink(missing_ok=True)
    seed = directory / machine_id
    if seed.is_dir() and not seed.is_symlink():
        shutil.rmtree(seed)
    else:
        seed.unlink(missing_ok=True)  # not ours to follow: a link (or a file) in its place


def write_private(path: pathlib.Path, data: bytes) -> None:
    """Write a file atomically, mode 0o640 from its creation: a seed holds a join credential,
    readable by the media server's group and no one else."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o640)
        with os.fdopen(fd, "wb") as out:
            fd = -1
            out.write(data)
    finally:
        if fd >= 0:
            os.close(fd)
    os.replace(tmp, path)
