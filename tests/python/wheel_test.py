#!/usr/bin/env python3
"""The wheel python/make_wheel.py writes (ctest: "python: the wheel installs with pip ...").

- it holds strata/__init__.py, one extension, every preset of configs/ and a RECORD whose
  hashes and sizes are those of its entries;
- `python3 -m pip install --no-index --no-deps --target DIR` installs it with no network;
- imported from DIR alone (no PYTHONPATH to the build, no STRATA_CONFIG_DIR, run from
  another folder), the module searches its own strata/configs for presets and answers
  predict, compare and describe as the build's module does, to the bit.

Without pip (python3-pip) the installation part is skipped: exit 77, saying why.
"""
import argparse
import base64
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

QUESTIONS = r"""
import json, strata
out = {
    "file": strata.__file__,
    "folders": strata.presets()["config_dirs"],
    "predict": strata.predict("alexnet-owt", "k20x8-pcie", "owt-b", 8, fc_update="round"),
    "compare": strata.compare("tiny-gpt", "dgx-a100", "naive,ring", [2, 8]),
    "describe": strata.describe("tiny-cnn")["totals"],
}
print(json.dumps(out, sort_keys=True))
"""


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def answers(python_path, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STRATA_CONFIG_DIR")}
    env["PYTHONPATH"] = str(python_path)
    r = subprocess.run([sys.executable, "-c", QUESTIONS], env=env, cwd=cwd, capture_output=True,
                       text=True)
    if r.returncode != 0:
        fail(f"import strata from {python_path}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheels", required=True)
    ap.add_argument("--build-module", required=True)
    ap.add_argument("--configs", required=True)
    a = ap.parse_args()
    wheels = sorted(pathlib.Path(a.wheels).glob("strata-*.whl"))
    if len(wheels) != 1:
        fail(f"one strata wheel expected in {a.wheels}, found {[w.name for w in wheels]}")
    wheel = wheels[0]
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if f"-{tag}-{tag}-" not in wheel.name:
        fail(f"{wheel.name} is not tagged for this python ({tag})")

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = [n for n in names if n.endswith(".dist-info/RECORD")]
        if len(info) != 1:
            fail(f"one RECORD expected, found {info}")
        record = z.read(info[0]).decode().splitlines()
        listed = set()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            listed.add(path)
            if path == info[0]:
                if digest or size:
                    fail("RECORD lists a hash of itself")
                continue
            data = z.read(path)
            want = "sha256=" + base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if digest != want or int(size) != len(data):
                fail(f"RECORD's {path}: {digest} {size}, the entry is {want} {len(data)}")
        if listed != names:
            fail(f"RECORD and the entries differ: {sorted(listed ^ names)}")
        if "strata/__init__.py" not in names or not any(
                n.startswith("strata/_strata") and n.endswith(".so") for n in names):
            fail(f"the package is missing from {sorted(names)}")
        configs = pathlib.Path(a.configs)
        for sub in ("networks", "clusters", "experiments"):
            for f in configs.glob(f"{sub}/*.yaml"):
                entry = f"strata/configs/{sub}/{f.name}"
                if entry not in names or z.read(entry) != f.read_bytes():
                    fail(f"{entry}: missing or not the preset's bytes")
    print(f"{wheel.name}: {len(names)} entries, RECORD checked")

    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    if pip.returncode != 0:
        print("SKIP: no pip for this python (apt-get install python3-pip): the wheel's contents "
              "are checked, its installation is not")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        target = pathlib.Path(tmp) / "site"
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                            "--disable-pip-version-check", "--quiet", "--target", str(target),
                            str(wheel)], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"pip install: exit {r.returncode}\n{r.stdout}{r.stderr}")
        installed = answers(target, tmp)
        built = answers(pathlib.Path(a.build_module).resolve(), tmp)
        if not installed["file"].startswith(str(target)):
            fail(f"imported {installed['file']}, not the installed one under {target}")
        own = str(target / "strata" / "configs")
        if installed["folders"] != [own]:
            fail(f"the installed module searches {installed['folders']}, not its own {own}")
        for key in ("predict", "compare", "describe"):
            if installed[key] != built[key]:
                fail(f"{key}: the installed module answers\n{installed[key]}\nthe build's\n"
                     f"{built[key]}")
    print("installed with pip --no-index --target: its own presets, predict, compare and "
          "describe equal the build's module")


if __name__ == "__main__":
    main()
