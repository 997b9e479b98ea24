#!/usr/bin/env python3
"""Progress bars: drawn on stderr when it is a terminal, silent when it is not.

Each long command (compare, sweep, search, profile) runs twice: with stderr on a
pseudo-terminal, where its bar must end full ("[####...] N/N what"), and with
stderr on a pipe, where stderr must stay empty (logs and pipes get no control
codes). Stdout is a pipe both times and must be the same.

Usage: progress_test.py --strata BIN
"""

import argparse
import os
import re
import subprocess
import sys
import threading
import unittest

ARGS = None

COMMANDS = {
    "compare": ["compare", "-n", "alexnet-owt", "-c", "k20x8-pcie", "-s", "all", "-k", "1,2,4"],
    "sweep": ["sweep", "--networks", "resnet50", "--clusters", "dgx-h100", "--workers", "2,4"],
    "search": ["search", "-n", "tiny-gpt", "-c", "dgx-a100", "-k", "8", "--global-batch", "16"],
    "profile": ["profile", "-n", "tiny-cnn", "--batch", "2", "--repeats", "2"],
}
WHAT = {
    "compare": (18, "configurations priced"),
    "sweep": (12, "configurations priced"),
    "search": (None, "layouts priced"),
    "profile": (3, "passes timed"),
}


def run_on_a_terminal(args):
    """(stdout, what the terminal showed on stderr, exit status)."""
    master, slave = os.openpty()
    p = subprocess.Popen([ARGS.strata, *args], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    out = []
    reader = threading.Thread(target=lambda: out.append(p.stdout.read()))
    reader.start()  # stdout drains while the terminal is read: no pipe fills up
    shown = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        shown += chunk
    reader.join()
    p.stdout.close()
    p.wait()
    os.close(master)
    return out[0].decode(), shown.decode(), p.returncode


class ProgressBars(unittest.TestCase):
    def test_drawn_on_a_terminal_silent_on_a_pipe(self):
        try:
            os.close(os.openpty()[0])
        except OSError as e:
            self.skipTest(f"no pseudo-terminal here: {e}")
        for name, args in COMMANDS.items():
            with self.subTest(command=name):
                out, shown, status = run_on_a_terminal(args)
                self.assertEqual(status, 0, shown)
                total, what = WHAT[name]
                last = shown.replace("\r\n", "\n").split("\r")[-1].strip()
                m = re.fullmatch(r"\[(#+)\] (\d+)/(\d+) (.*)", last)
                self.assertIsNotNone(m, repr(last))
                self.assertEqual(len(m.group(1)), 30)  # full
                self.assertEqual(m.group(2), m.group(3))
                if total is not None:
                    self.assertEqual(int(m.group(3)), total)
                self.assertTrue(m.group(4).startswith(what), m.group(4))
                piped = subprocess.run([ARGS.strata, *args], capture_output=True, text=True,
                                       check=False)
                self.assertEqual(piped.returncode, 0, piped.stderr)
                self.assertEqual(piped.stderr, "")
                if name != "profile":  # a measurement differs from run to run
                    # search says how long it took ("in 2.0 s"): a wall-clock
                    # figure that differs from run to run (under ASan, 2.0
                    # against 2.4 s).
                    def untimed(text):
                        return re.sub(r"in \d+(\.\d+)? (s|ms|min)\b", "in <time>", text)

                    self.assertEqual(untimed(piped.stdout), untimed(out))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--strata", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest])
