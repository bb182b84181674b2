"""Pack an evidence folder that only the lab log reads into one FOLDER.tar.xz, or unpack one.

A folder of many small files (a past run's curves, hypotheses, paired tests, configs) is kept as
one archive, so that results/ stays small and its files few; the lab log still names each file
as it was (results/training/zen1/val_beam5_main_s1.json lies in results/training/zen1.tar.xz),
and tests/test_docs.py looks into the archive for it. A gzipped file goes in unzipped, under its
name without .gz (xz compresses the files together: results/training/zen5 takes 166 kB so
against 426 kB as gzipped files in one gzipped tar), and comes back so; lookback reads either. The
archive is the same bytes for the same files (members sorted, times and owners zeroed), so
packing again changes nothing in git.

    python results/pack.py results/training/zen1              # -> results/training/zen1.tar.xz
    python results/pack.py --unpack results/training/zen1.tar.xz   # the folder back, beside it
"""

import argparse
import gzip
import io
import lzma
import shutil
import tarfile
from pathlib import Path


def pack(folder: Path) -> Path:
    """`folder` as folder.tar.xz beside it (its files under the folder's name, gzipped ones
    unzipped); the folder removed."""
    archive = folder.with_name(f"{folder.name}.tar.xz")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            name, data = f"{folder.name}/{path.relative_to(folder).as_posix()}", path.read_bytes()
            if name.endswith(".gz"):
                name, data = name.removesuffix(".gz"), gzip.decompress(data)
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(lzma.compress(buffer.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    shutil.rmtree(folder)
    return archive


def unpack(archive: Path) -> Path:
    """The folder back beside its archive."""
    with tarfile.open(archive) as tar:
        tar.extractall(archive.parent, filter="data")
    return archive.with_name(archive.name.removesuffix(".tar.xz"))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", type=Path, help="folders to pack (or archives, with --unpack)")
    p.add_argument("--unpack", action="store_true", help="unpack these archives beside themselves")
    args = p.parse_args()
    for path in args.paths:
        print(unpack(path) if args.unpack else pack(path))
