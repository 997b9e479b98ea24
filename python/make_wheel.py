#!/usr/bin/env python3
"""Packs the built module into a wheel: `python3 -m pip install` takes it offline.

    make_wheel.py --package BUILD/python/strata --configs SRC/configs --version 0.1.0 --out DIR

The wheel holds strata/__init__.py, the extension (_strata.cpython-*.so) and
the presets (strata/configs/networks, clusters, experiments), which
__init__.py makes the module's built-in ones. It is tagged for the Python
that runs this script (cpXY-cpXY-linux_x86_64, say): a wheel of this
machine, whose shared libraries (libfmt, libyaml-cpp, libprotobuf and
libonnx_proto from Debian) the module links; it is no manylinux wheel.
Prints the wheel's path. Standard library only (zipfile, hashlib), and the
same bytes for the same inputs (fixed timestamps, sorted entries).
"""
import argparse
import base64
import hashlib
import pathlib
import sys
import sysconfig
import zipfile


def digest(data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={h}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", required=True, help="the built package folder (strata/)")
    ap.add_argument("--configs", required=True, help="the presets folder (configs/)")
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", required=True, help="folder for the .whl")
    a = ap.parse_args()
    package, configs = pathlib.Path(a.package), pathlib.Path(a.configs)
    extensions = sorted(package.glob("_strata*.so"))
    if len(extensions) != 1 or not (package / "__init__.py").is_file():
        sys.exit(f"make_wheel.py: {package} must hold __init__.py and one _strata*.so, "
                 f"found {[p.name for p in package.iterdir()] if package.is_dir() else 'nothing'}")
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"{py}-{py}-{platform}"
    name = f"strata-{a.version}"
    files = {
        "strata/__init__.py": (package / "__init__.py").read_bytes(),
        f"strata/{extensions[0].name}": extensions[0].read_bytes(),
    }
    for sub in ("networks", "clusters", "experiments"):
        for f in sorted((configs / sub).glob("*.yaml")):
            files[f"strata/configs/{sub}/{f.name}"] = f.read_bytes()
    info = f"{name}.dist-info"
    files[f"{info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        "Name: strata\n"
        f"Version: {a.version}\n"
        "Summary: How fast a network trains on a cluster under a parallelization strategy\n"
        f"Requires-Python: =={sys.version_info.major}.{sys.version_info.minor}.*\n").encode()
    files[f"{info}/WHEEL"] = ("Wheel-Version: 1.0\n"
                              "Generator: strata make_wheel.py\n"
                              "Root-Is-Purelib: false\n"
                              f"Tag: {tag}\n").encode()
    files[f"{info}/top_level.txt"] = b"strata\n"
    record = [f"{path},{digest(data)},{len(data)}" for path, data in files.items()]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{name}-{tag}.whl"
    partial = wheel.with_suffix(".whl.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            entry = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            entry.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, data)
    partial.replace(wheel)  # never a half-written wheel under the final name
    print(wheel)


if __name__ == "__main__":
    main()
