#!/usr/bin/env python3
"""One step of gpu-bundle/check, summarised from its output: the step's key
figure (with its unit) and, when it failed, the one line a developer needs.

  step_summary.py KIND STATUS OUTPUT [LIMIT_S]

KIND says what ran (gpu, test, bench, describe, run, torch, profile, calibrate,
predict, allreduce, validate); STATUS is its exit status (124 or 137: killed
at its time limit LIMIT_S). Prints two lines: the figure ("-" when there is
none) and the reason it failed (empty when STATUS is 0). Standard library
only: it runs wherever check runs.
"""
import json
import re
import sys

# Where a CUDA, cuBLAS, cuDNN or NCCL call reports its status (strata's
# messages name the call and the status; PyTorch's and the runtime's name the
# error).
_STATUS = re.compile(r"\b(cuda[A-Z]\w*|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|nccl[A-Z]\w*Error|"
                     r"CUDA error|CUDA out of memory|CUDA driver|cudaError\w*)")
# A Python exception's last line ("RuntimeError: ...", "torch.OutOfMemoryError: ...").
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt))(: .*)?$")
_SIGNALS = {129: "SIGHUP", 130: "SIGINT", 131: "SIGQUIT", 132: "SIGILL", 134: "SIGABRT",
            135: "SIGBUS", 136: "SIGFPE", 137: "SIGKILL", 139: "SIGSEGV", 141: "SIGPIPE",
            143: "SIGTERM"}
_MAX = 400  # characters of a reason: one line in a summary


def _lines(text):
    return [line.rstrip() for line in text.splitlines()]


def _squeeze(s):
    return re.sub(r"\s+", " ", s).strip()


def _last(pattern, lines):
    for line in reversed(lines):
        m = re.search(pattern, line)
        if m:
            return m
    return None


def _first(pattern, lines):
    for line in lines:
        m = re.search(pattern, line)
        if m:
            return m
    return None


# ---- key figures ----

def _catch2_counts(lines):
    """Catch2's closing lines: 'All tests passed (N assertions in M test cases)'
    or 'test cases: M | P passed | F failed' and 'assertions: ...'."""
    m = _last(r"All tests passed \((\d+) assertions? in (\d+) test cases?\)", lines)
    if m:
        return f"{m.group(2)} test cases, {m.group(1)} assertions passed"
    cases = _last(r"^test cases:\s*(\d+)\s*\|(.*)$", lines)
    asserts = _last(r"^assertions:\s*(\d+)\s*\|(.*)$", lines)
    if cases:
        failed = re.search(r"(\d+) failed", cases.group(2))
        text = f"{failed.group(1) if failed else 0} of {cases.group(1)} test cases failed"
        if asserts:
            failed = re.search(r"(\d+) failed", asserts.group(2))
            text += (f", {failed.group(1) if failed else 0} of {asserts.group(1)} assertions "
                     "failed")
        return text
    return None


def _run_figure(lines):
    step = _last(r"^step time\s+(\S+ \S+)", lines)
    if not step:
        return None
    losses = [m.group(1) for m in (re.search(r"^step\s+\d+/\d+\s+loss\s+(\S+)", line)
                                   for line in lines) if m]
    text = f"step {step.group(1)}"
    if losses:
        text += f", loss {losses[0]} -> {losses[-1]}"
    return text


def _torch_figure(lines):
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "median_step_ms" in j:
                return (f"median step {j['median_step_ms']:.2f} ms (min {j['min_step_ms']:.2f},"
                        f" max {j['max_step_ms']:.2f} ms), {j.get('precision', '?')}, "
                        f"{j.get('optimizer', '?')}, {j.get('params', '?')} parameters")
    return None


def _allreduce_figure(lines):
    avg = _last(r"^avg busbw \(sizes >= [^)]*\): (.*)$", lines)
    if avg:
        return f"avg busbw {avg.group(1)}"
    # One worker (no bandwidth) or no size of 16 MiB: the largest size's times.
    header = _first(r"^\s*size\s+count\s*\|", lines)
    rows = [line for line in lines if re.match(r"^\s*\d+ [KMG]?i?B\s+\d+\s*\|", line)]
    if not header or not rows:
        return None
    names = re.findall(r"([\w-]+): time", header.string)
    cells = [c.split() for c in rows[-1].split("|")]
    times = [f"{name} {' '.join(cell[:2])}" for name, cell in zip(names, cells[1:])]
    return f"{' '.join(cells[0][:2])}: " + ", ".join(times)


def _validate_figure(lines):
    m = _last(r"step time \|error\| over (\d+) (.*?)rows.*?: model median ([\d.]+ %), worst "
              r"([\d.]+ %); simulator median ([\d.]+ %), worst ([\d.]+ %)", lines)
    if not m:
        return None
    return (f"|error| over {m.group(1)} rows: model median {m.group(3)}, worst {m.group(4)}; "
            f"simulator median {m.group(5)}, worst {m.group(6)}")


def _calibrate_figure(lines):
    parts = []
    for label, start in (("GEMM peak", ""), ("memory", r"\d"), ("link", "alpha")):
        m = _first(rf"^{label}\s+({start}.*)$", lines)
        if m:
            parts.append(f"{label} {_squeeze(m.group(1))}")
    return "; ".join(parts) or None


def _bench_figure(lines):
    rows = [line for line in lines
            if re.match(r"^\S+\s+[\d.]+ (ns|us|ms|s)\s+[\d.]+ (ns|us|ms|s)\s+\d+", line)]
    return f"{len(rows)} benchmarks" if rows else None


def _describe_figure(text):
    try:
        j = json.loads(text)
        return f"{len(j['layers'])} layers, {j['totals']['params']} parameters"
    except (ValueError, KeyError, TypeError):
        return None


def figure(kind, text):
    """The step's key figure with its unit, or None."""
    lines = _lines(text)
    if kind == "test":
        return _catch2_counts(lines)
    if kind in ("run", "predict"):
        f = _run_figure(lines)
        return f if kind == "run" or not f else "predicted " + f.split(",")[0]
    if kind == "torch":
        return _torch_figure(lines)
    if kind == "profile":
        # With -c CLUSTER: "total 11.0 ms measured, 13.8 ms priced (+25 %)".
        m = _last(r"^total (\S+ \S+) measured(?:, (\S+ \S+) priced \(([^)]*)\))?", lines)
        if not m:
            return None
        if m.group(2):
            return f"total {m.group(1)}, priced {m.group(2)} ({m.group(3)})"
        return f"total {m.group(1)}"
    if kind == "allreduce":
        return _allreduce_figure(lines)
    if kind == "validate":
        return _validate_figure(lines)
    if kind == "calibrate":
        return _calibrate_figure(lines)
    if kind == "bench":
        return _bench_figure(lines)
    if kind == "describe":
        return _describe_figure(text)
    if kind == "gpu":  # nvidia-smi's CSV: a header, then a row per GPU
        if not lines or not lines[0].startswith("name,"):
            return None
        rows = [_squeeze(line) for line in lines[1:] if line.strip()]
        return "; ".join(rows) or None
    return None


# ---- the one line a developer needs ----

def _catch2_failure(lines):
    """The first failed assertion: '<test case>: <file:line>: <what>', where
    <what> is the INFO/CAPTURE messages (the mismatching element), or the
    exception's message, or the assertion and its expansion."""
    for i, line in enumerate(lines):
        m = re.match(r"^(\S+:\d+): FAILED:$", line)
        if not m:
            continue
        case = None
        for j in range(i - 1, 0, -1):  # the test case's name sits between two dashed rules
            if re.match(r"^-{20,}$", lines[j]) and j >= 2 and re.match(r"^-{20,}$", lines[j - 2]):
                case = lines[j - 1].strip()
                break
        body, k = [], i + 1
        while k < len(lines) and lines[k].strip() and not re.match(r"^\S+:\d+: FAILED:$",
                                                                   lines[k]):
            body.append(lines[k])
            k += 1
        detail = _catch2_detail(body)
        failed = _last(r"^test cases:.*\|\s*(\d+) failed", lines)
        more = ""
        if failed and int(failed.group(1)) > 1:
            n = int(failed.group(1)) - 1
            more = f" (+{n} more failed test case{'s' if n > 1 else ''})"
        return f"{case + ': ' if case else ''}{m.group(1)}: {detail}{more}"
    return None


def _catch2_unwrap(raw):
    """Catch2 wraps a message at 79 columns: a line is the one before's
    continuation when its first word did not fit there."""
    out, previous = [], None
    for line in raw:
        first = line.split()[0] if line.split() else ""
        if previous is not None and len(previous) + 1 + len(first) > 79:
            out[-1] += " " + line.strip()
        else:
            out.append(line.strip())
        previous = line
    return out


def _catch2_detail(body):
    sections, current = {"assertion": []}, "assertion"
    for line in body:
        if not line.startswith(" "):
            current = line.rstrip(":")
            sections[current] = []
        else:
            sections[current].append(line)
    sections = {name: _catch2_unwrap(raw) for name, raw in sections.items()}
    for name, values in sections.items():
        if "exception" in name or name.startswith("explicitly"):
            return "; ".join(values)
    messages = sections.get("with messages") or sections.get("with message") or []
    text = "; ".join(sections["assertion"])
    expansion = "; ".join(sections.get("with expansion", []))
    if expansion:
        text += f" with {expansion}"
    if messages:
        text = "; ".join(messages) + (f" [{text}]" if text else "")
    return text


def why(kind, status, text, limit=None):
    """The one line a developer needs, for a failed step (status != 0)."""
    lines = [line for line in _lines(text) if line.strip()]
    lines = [line for line in lines if not re.match(r"^\(killed after \d+ s\)$", line)]
    prefix = ""
    if status in (124, 137):
        prefix = f"timed out after {limit} s; " if limit else "timed out; "
    elif status in _SIGNALS:
        prefix = f"killed by {_SIGNALS[status]}; "
    elif status == 77 and kind == "test":
        prefix = "no usable GPU (the program skipped itself); "
    elif status in (126, 127):
        prefix = "command not found; " if status == 127 else "command not executable; "
    found = None
    if kind == "test":
        found = _catch2_failure(lines)
        if found is None and status in (124, 137):
            done = _last(r"^[\d.]+ s: (.*)$", lines)  # -d yes: each finished test case
            if done:
                found = f"last finished test case: {done.group(1)}"
    if found is None:
        m = _first(r"strata: error: .*", lines)
        found = m.group(0) if m else None
    if found is None:  # an uncaught C++ exception: std::terminate's "what():" line
        m = _first(r"what\(\):\s*(.*)", lines)
        found = f"uncaught exception: {m.group(1)}" if m else None
    if found is None:
        m = _last(_EXCEPTION.pattern, lines)
        found = m.group(0) if m else None
    if found is None:
        m = _first(_STATUS.pattern, lines)
        found = m.string if m else None
    if found is None:
        found = f"last line: {lines[-1]}" if lines else "no output"
    line = prefix + _squeeze(found)
    return line if len(line) <= _MAX else line[:_MAX - 3] + "..."


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    kind, status, path = argv[1], int(argv[2]), argv[3]
    limit = argv[4] if len(argv) == 5 else None
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError as e:
        text = f"(no output: {e})"
    print(figure(kind, text) or "-")
    print(why(kind, status, text, limit) if status != 0 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
