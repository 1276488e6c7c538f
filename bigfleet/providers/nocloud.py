"""cloud-init NoCloud seeds: the files a machine's cloud-init reads its user data from.

cloud-init's NoCloud datasource takes `user-data` and `meta-data` either from a filesystem
labelled `cidata` (ISO9660 or vfat: here an ISO9660 image, for a BMC to insert as virtual
media) or, with the kernel argument `ds=nocloud-net;s=<url>/`, over HTTP from `<url>user-data`
and `<url>meta-data`. meta-data holds at least `instance-id`: cloud-init runs the user data
once per instance id, so a new id per bootstrap blob makes a reused machine run the new one.

The image is written here, not by a tool: ECMA-119 (ISO9660) with the Joliet extension, one
root directory, no Rock Ridge. The Joliet tree carries the names exactly (`user-data` is not
an ISO9660 level 1 name: its primary tree holds `USER_DAT.;1`); Linux, the BSDs and Windows
read the Joliet tree when it is there, and blkid reports the volume label `cidata`, which is
how cloud-init finds the disk.
"""

from __future__ import annotations

import datetime
import json
import re
import struct
from collections.abc import Mapping

SECTOR = 2048
LABEL = "cidata"
_FIRST_DESCRIPTOR = 16  # sectors 0-15 are the system area
_JOLIET_UCS2_LEVEL_3 = b"%/E"


def instance_id(machine_id: str, digest: str) -> str:
    """The machine's instance id for one blob (its sha256 hex digest): new blob, new instance."""
    return f"{machine_id}-{digest[:16]}"


def hostname(machine_id: str) -> str:
    """A host name (one DNS label) for the machine: its id, lower case, at most 63 characters."""
    label = re.sub(r"[^a-z0-9-]", "-", machine_id.lower())[:63].strip("-")
    return label or "bigfleet-machine"


def meta_data(instance: str, host: str) -> bytes:
    """NoCloud meta-data (YAML; the values as JSON strings, which YAML reads unchanged)."""
    return f"instance-id: {json.dumps(instance)}\nlocal-hostname: {json.dumps(host)}\n".encode()


def seed_files(machine_id: str, user_data: bytes, digest: str) -> dict[str, bytes]:
    """The NoCloud seed of one machine for one blob: name -> content."""
    return {
        "meta-data": meta_data(instance_id(machine_id, digest), hostname(machine_id)),
        "user-data": user_data,
    }


def cidata_iso(files: Mapping[str, bytes], created: datetime.datetime | None = None) -> bytes:
    """An ISO9660 + Joliet image labelled `cidata` holding `files` (name -> content) in its root."""
    return iso9660(files, LABEL, created)


# -- the ISO9660 writer --------------------------------------------------------------------


def iso9660(
    files: Mapping[str, bytes], volume_id: str, created: datetime.datetime | None = None
) -> bytes:
    """A single-directory ISO9660 image with a Joliet tree; names up to 64 characters.

    Layout (2048-byte sectors): 0-15 system area, 16 primary volume descriptor, 17 Joliet
    supplementary volume descriptor, 18 terminator, 19-22 the type L and type M path tables of
    each tree, 23 the primary root directory, 24 the Joliet root directory, then the files.
    """
    if not files:
        raise ValueError("an image needs at least one file")
    # Lower case is not a d-character, but `cidata` is the label cloud-init looks for (as
    # genisoimage -volid cidata writes it); blkid reports it as written.
    if not 1 <= len(volume_id) <= 16 or not re.fullmatch(r"[A-Za-z0-9_]+", volume_id):
        raise ValueError(f"volume id {volume_id!r}: 1 to 16 letters, digits or underscores")
    when = (created or datetime.datetime.now(datetime.UTC)).astimezone(datetime.UTC)
    names = sorted(files)
    primary = {name: _primary_name(name) for name in names}
    if len(set(primary.values())) != len(names):
        raise ValueError(f"file names {names} collide as ISO9660 names")
    for name in names:
        if not 1 <= len(name) <= 64 or "/" in name or ";" in name or "\\" in name:
            raise ValueError(f"file name {name!r}: 1 to 64 characters, no / ; or \\")
        if len(files[name]) >= 2**32:
            raise ValueError(f"file {name}: larger than ISO9660 allows")

    l_path = (_FIRST_DESCRIPTOR + 3, _FIRST_DESCRIPTOR + 4)  # primary, Joliet
    m_path = (_FIRST_DESCRIPTOR + 5, _FIRST_DESCRIPTOR + 6)
    roots = (_FIRST_DESCRIPTOR + 7, _FIRST_DESCRIPTOR + 8)
    extents: dict[str, int] = {}
    sector = roots[1] + 1
    for name in names:
        extents[name] = sector
        sector += max(1, -(-len(files[name]) // SECTOR))
    total = sector

    stamp = _dir_date(when)
    trees = []
    for joliet, root in ((False, roots[0]), (True, roots[1])):
        records = [
            _dir_record(root, SECTOR, 0x02, b"\x00", stamp),  # "."
            _dir_record(root, SECTOR, 0x02, b"\x01", stamp),  # ".." (the root's parent: itself)
        ]
        ordered = sorted(names, key=lambda n: _joliet(n) if joliet else primary[n])
        for name in ordered:
            ident = _joliet(name) if joliet else primary[name]
            records.append(_dir_record(extents[name], len(files[name]), 0x00, ident, stamp))
        directory = b"".join(records)
        if len(directory) > SECTOR:
            raise ValueError("too many files for a one-sector root directory")
        trees.append(directory.ljust(SECTOR, b"\x00"))

    image = bytearray(total * SECTOR)
    path_table_size = 10  # the root alone
    for joliet in (False, True):
        descriptor = _volume_descriptor(
            joliet=joliet,
            volume_id=volume_id,
            total=total,
            path_table_size=path_table_size,
            l_path=l_path[joliet],
            m_path=m_path[joliet],
            root=_dir_record(roots[joliet], SECTOR, 0x02, b"\x00", stamp),
            when=when,
        )
        _put(image, _FIRST_DESCRIPTOR + joliet, descriptor)
        _put(image, l_path[joliet], _path_record(roots[joliet], "<"))
        _put(image, m_path[joliet], _path_record(roots[joliet], ">"))
        _put(image, roots[joliet], trees[joliet])
    _put(image, _FIRST_DESCRIPTOR + 2, b"\xffCD001\x01")  # volume descriptor set terminator
    for name in names:
        _put(image, extents[name], files[name])
    return bytes(image)


def _put(image: bytearray, sector: int, data: bytes) -> None:
    image[sector * SECTOR : sector * SECTOR + len(data)] = data


def _both16(n: int) -> bytes:
    return struct.pack("<H", n) + struct.pack(">H", n)


def _both32(n: int) -> bytes:
    return struct.pack("<I", n) + struct.pack(">I", n)


def _primary_name(name: str) -> bytes:
    """The level 1 (8.3, d-characters) ISO9660 identifier for a name: user-data -> USER_DAT.;1"""
    stem, _, ext = name.upper().rpartition(".") if "." in name else (name.upper(), "", "")
    stem = re.sub(r"[^A-Z0-9_]", "_", stem)[:8] or "_"
    ext = re.sub(r"[^A-Z0-9_]", "_", ext)[:3]
    return f"{stem}.{ext};1".encode("ascii")


def _joliet(name: str) -> bytes:
    return name.encode("utf-16-be")


def _dir_date(when: datetime.datetime) -> bytes:
    """ECMA-119 9.1.5: years since 1900, month, day, hour, minute, second, UTC offset (0)."""
    return bytes([when.year - 1900, when.month, when.day, when.hour, when.minute, when.second, 0])


def _volume_date(when: datetime.datetime | None) -> bytes:
    """ECMA-119 8.4.26.1: 16 digits (hundredths last) and the UTC offset; zeros when unset."""
    if when is None:
        return b"0" * 16 + b"\x00"
    return when.strftime("%Y%m%d%H%M%S").encode("ascii") + b"00\x00"


def _dir_record(extent: int, size: int, flags: int, ident: bytes, stamp: bytes) -> bytes:
    """ECMA-119 9.1: one directory record, padded to an even length."""
    body = (
        b"\x00"  # extended attribute record length
        + _both32(extent)
        + _both32(size)
        + stamp
        + bytes([flags, 0, 0])  # flags, file unit size, interleave gap
        + _both16(1)  # volume sequence number
        + bytes([len(ident)])
        + ident
    )
    if len(ident) % 2 == 0:
        body += b"\x00"  # the padding field: the record's length (which counts it) is even
    return bytes([len(body) + 1]) + body


def _path_record(extent: int, order: str) -> bytes:
    """ECMA-119 9.4: the root's path table record (little- or big-endian)."""
    return bytes([1, 0]) + struct.pack(f"{order}IH", extent, 1) + b"\x00\x00"


def _text(value: str, size: int, joliet: bool) -> bytes:
    """An identifier field: a-characters padded with spaces, or UCS-2 for Joliet."""
    if not joliet:
        return value.encode("ascii").ljust(size, b" ")
    encoded = value.encode("utf-16-be")
    encoded += b"\x00 " * (size // 2 - len(encoded) // 2)  # UCS-2 spaces
    return encoded.ljust(size, b"\x00")


def _volume_descriptor(
    *,
    joliet: bool,
    volume_id: str,
    total: int,
    path_table_size: int,
    l_path: int,
    m_path: int,
    root: bytes,
    when: datetime.datetime,
) -> bytes:
    """ECMA-119 8.4 (primary) or 8.5 (supplementary: Joliet, UCS-2 level 3)."""
    d = bytearray(SECTOR)
    d[0:7] = (b"\x02" if joliet else b"\x01") + b"CD001\x01"
    d[8:40] = _text("", 32, joliet)  # system identifier
    d[40:72] = _text(volume_id, 32, joliet)
    d[80:88] = _both32(total)
    if joliet:
        d[88:91] = _JOLIET_UCS2_LEVEL_3
    d[120:124] = _both16(1)  # volume set size
    d[124:128] = _both16(1)  # volume sequence number
    d[128:132] = _both16(SECTOR)
    d[132:140] = _both32(path_table_size)
    d[140:144] = struct.pack("<I", l_path)
    d[148:152] = struct.pack(">I", m_path)
    d[156:190] = root
    d[190:318] = _text("", 128, joliet)  # volume set identifier
    d[318:446] = _text("", 128, joliet)  # publisher
    d[446:574] = _text("", 128, joliet)  # data preparer
    d[574:702] = _text("BIGFLEET", 128, joliet)  # application
    d[702:739] = _text("", 37, joliet)  # copyright file
    d[739:776] = _text("", 37, joliet)  # abstract file
    d[776:813] = _text("", 37, joliet)  # bibliographic file
    d[813:830] = _volume_date(when)  # creation
    d[830:847] = _volume_date(when)  # modification
    d[847:864] = _volume_date(None)  # expiration
    d[864:881] = _volume_date(when)  # effective
    d[881] = 1  # file structure version
    return bytes(d)
