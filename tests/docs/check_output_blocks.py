#!/usr/bin/env python3
"""Re-runs the `$ strata ...` output blocks of a Markdown page and compares them
with what the page shows (docs/testing.md, "Output blocks in the docs").

A fenced block whose first line starts with `$ ` is an output block. It holds
one or more commands, each a line `$ COMMAND`, followed by the output the page
shows for it. The HTML comment right before the fence says how it is checked:

    <!-- output: exact -->             run it, compare every character
    <!-- output: measured -->          run it, mask measured figures (a number
                                       with a time or rate unit, a loss, a table
                                       rule), compare
                                       the rest with runs of spaces collapsed
    <!-- output: pending REASON -->    run it, compare exactly; a difference is
                                       expected (REASON) and reported without
                                       failing; a block that now matches fails
                                       (drop `pending`)
    <!-- output: skip REASON -->       not run (REASON: it takes minutes, needs
                                       mpirun, ...)

`, needs onnx` after the mode skips the block in a build without the ONNX
import. An output block without a marker fails: every block shown as output is
either checked or says why not.

In the expected output a line `...` stands for any number of lines, and `...`
inside a line for any text. A command ending in `# exit N` must exit with
status N, any other with 0. Commands run under bash (pipes work) in a scratch
folder that links every top-level entry of the repository (so relative paths
such as configs/... resolve and files a command writes stay out of the tree),
with `strata` on PATH being the binary under test and stderr merged into
stdout.

Usage: check_output_blocks.py --strata BIN --root REPO [--onnx on|off]
                              [--timeout S] FILE.md
"""

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile

MARKER = re.compile(r"^<!--\s*output:\s*(\w+)\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)(.*)$")
EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")

# Measured figures: a number followed by a unit of time or of rate. Each is
# replaced by one token of its class, so 9.37 ms and 82.4 us compare equal.
TIME_UNITS = r"(?:ns|us|µs|ms|s|min|h)"
RATE_UNITS = r"(?:[KMGT]?B/s|ex/s|examples/s|steps/s)"
NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
MASKS = [
    (re.compile(NUMBER + r"\s?" + RATE_UNITS + r"(?![\w/])"), "<rate>"),
    (re.compile(NUMBER + r"\s?" + TIME_UNITS + r"(?![\w/])"), "<time>"),
    (re.compile(r"\bloss\s+" + NUMBER), "loss <loss>"),
    (re.compile(r"(?<![\w.])" + NUMBER + r"\s?%"), "<percent>"),
    (re.compile(r"(?<![\w.])" + NUMBER + r"x(?!\w)"), "<ratio>"),
    # The CPU kernels' instruction set is the machine's (avx512 on one VM,
    # avx2 on another): `strata run`'s "cpu kernels: avx2 (AVX2, FMA)".
    (re.compile(r"cpu kernels: \S+ \([^)]*\)"), "cpu kernels: <isa>"),
    # A table's rule under its header is as wide as its widest cell, which a
    # measured figure changes ("36.4 ms" against "2.81 s").
    (re.compile(r"(?<![^\s])-{2,}(?![^\s])"), "--"),
]


def mask(line):
    for pattern, token in MASKS:
        line = pattern.sub(token, line)
    return " ".join(line.split())


class Block:
    def __init__(self, path, line, mode, note, text):
        self.path, self.line, self.mode, self.note = path, line, mode, note
        self.commands = []  # (command, expected lines)
        for raw in text:
            if raw.startswith("$ "):
                self.commands.append((raw[2:], []))
            elif self.commands:
                self.commands[-1][1].append(raw)


def read_blocks(path):
    """Every fenced block whose first line starts with `$ `, with its marker."""
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, errors = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m.group(1), m.group(2)
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        if not body or not body[0].startswith("$ "):
            continue
        # The marker: the nearest non-blank line above the fence.
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        marker = MARKER.match(lines[j].strip()) if j >= 0 else None
        if not marker:
            errors.append(f"{path}:{start + 1}: an output block (`{body[0]}`) without a "
                          "marker: put <!-- output: exact|measured|pending REASON|skip REASON --> "
                          "before its fence")
            continue
        mode, note = marker.group(1), marker.group(2)
        if mode not in ("exact", "measured", "pending", "skip"):
            errors.append(f"{path}:{j + 1}: unknown output mode '{mode}' "
                          "(exact, measured, pending or skip)")
            continue
        if mode in ("pending", "skip") and not note.strip(" ,"):
            errors.append(f"{path}:{j + 1}: `{mode}` needs a reason")
            continue
        blocks.append(Block(path, start + 1, mode, note, body))
    return blocks, errors


def to_regex(line, masked):
    """A pattern line: `...` inside it matches any text."""
    parts = line.split("...")
    if masked:
        parts = [mask(p) if p.strip() else p.strip() for p in parts]
    return re.compile("^" + ".*".join(re.escape(p) for p in parts) + "$", re.S)


def matches(expected, actual, masked):
    """Whether `actual` lines fit `expected` (with `...` elisions)."""
    norm = (lambda s: mask(s)) if masked else (lambda s: s.rstrip())
    exp = [e.rstrip() for e in expected]
    act = [norm(a) for a in actual]
    # Dynamic programming over (expected index, actual index).
    from functools import lru_cache

    pats = [None if e.strip() == "..." else (to_regex(e, masked) if "..." in e else None)
            for e in exp]

    @lru_cache(maxsize=None)
    def fit(i, j):
        if i == len(exp):
            return j == len(act)
        if exp[i].strip() == "...":
            return any(fit(i + 1, jj) for jj in range(j, len(act) + 1))
        if j == len(act):
            return False
        if pats[i] is not None:
            ok = bool(pats[i].match(act[j]))
        else:
            ok = (mask(exp[i]) if masked else exp[i]) == act[j]
        return ok and fit(i + 1, j + 1)

    sys.setrecursionlimit(max(10000, 4 * (len(exp) + len(act)) + 100))
    return fit(0, 0)


def scratch_folder(root, strata):
    tmp = tempfile.mkdtemp(prefix="strata-doc-")
    root = os.path.abspath(root)
    for entry in os.listdir(root):
        if entry in (".git",):
            continue
        os.symlink(os.path.join(root, entry), os.path.join(tmp, entry))
    bindir = os.path.join(tmp, ".bin")
    os.mkdir(bindir)
    os.symlink(os.path.abspath(strata), os.path.join(bindir, "strata"))
    return tmp, bindir


def run(command, cwd, bindir, timeout):
    env = dict(os.environ)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["COLUMNS"] = "200"
    try:
        p = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, [f"(timed out after {timeout} s)"]
    out = p.stdout.decode("utf-8", "replace").split("\n")
    if out and out[-1] == "":
        out.pop()
    return p.returncode, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--onnx", default="on", choices=["on", "off"])
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("markdown")
    args = ap.parse_args()

    path = args.markdown
    shown = os.path.relpath(path, args.root)
    blocks, errors = read_blocks(path)
    failures = list(errors)
    counts = {"exact": 0, "measured": 0, "pending": 0, "skip": 0}
    tmp, bindir = scratch_folder(args.root, args.strata)
    try:
        for b in blocks:
            where = f"{shown}:{b.line}"
            if b.mode == "skip":
                print(f"SKIP {where}: {b.note}")
                counts["skip"] += 1
                continue
            if "needs onnx" in b.note and args.onnx == "off":
                print(f"SKIP {where}: needs the ONNX import (a build without it)")
                counts["skip"] += 1
                continue
            counts[b.mode] += 1
            drift = []
            for command, expected in b.commands:
                m = EXIT.search(command)
                want = int(m.group(1)) if m else 0
                masked = b.mode == "measured"
                # A measurement may differ in more than its figures once in a
                # while (a loaded machine): measured blocks get a second run.
                for _ in range(2 if masked else 1):
                    status, actual = run(command, tmp, bindir, args.timeout)
                    ok = status == want and matches(expected, actual, masked)
                    if ok:
                        break
                    if masked:
                        print(f"note {where}: `{command}` differed once; running it again")
                        print("\n".join(actual))
                if not ok:
                    diff = "\n".join(difflib.unified_diff(
                        expected, actual, fromfile=f"{where} (shown)",
                        tofile="actual output", lineterm=""))
                    drift.append(f"$ {command}\nexit status {status}, expected {want}\n{diff}")
            if b.mode == "pending":
                if drift:
                    print(f"PENDING {where}: differs, as expected ({b.note})")
                    for d in drift:
                        print(d)
                else:
                    failures.append(f"{where}: marked pending ({b.note}) but now matches: "
                                    "change its marker to <!-- output: exact -->")
                continue
            if drift:
                failures.append(f"{where}: the output shown differs from the binary's "
                                f"({b.mode}):\n" + "\n".join(drift))
            else:
                print(f"ok   {where} ({b.mode}, {len(b.commands)} command"
                      f"{'' if len(b.commands) == 1 else 's'})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{shown}: {counts['exact']} exact, {counts['measured']} measured, "
          f"{counts['pending']} pending, {counts['skip']} skipped; {len(failures)} failing")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
