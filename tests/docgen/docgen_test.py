#!/usr/bin/env python3
"""The generated man page and bash completion (cli/docgen.cpp) against strata itself.

Every subcommand has its section in the man page and every option of its --help
is there; man renders it without a warning. The completion script, sourced in
bash, completes subcommands, options, option values (from the enums) and
presets (from strata list) as a person would expect.

Usage: docgen_test.py --strata BIN --man strata.1 --completion strata
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import unittest

ARGS = None


def strata(*args):
    return subprocess.run([ARGS.strata, *args], capture_output=True, text=True,
                          check=True).stdout


def complete(*words):
    """COMPREPLY for the command line `words` (the last one being completed)."""
    script = (f"source {ARGS.completion}\n"
              "COMP_WORDS=(\"$@\"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()\n"
              "_strata\n"
              "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    env = dict(os.environ, PATH=os.path.dirname(ARGS.strata) + os.pathsep + os.environ["PATH"])
    p = subprocess.run(["bash", "-c", script, "bash", *words], capture_output=True, text=True,
                       env=env, check=True)
    return [w for w in p.stdout.split("\n") if w]


class ManPage(unittest.TestCase):
    def test_every_command_and_option(self):
        with open(ARGS.man) as f:
            page = f.read()
        listed = strata("--help").split("Subcommands:")[1].split("\n\n")[0]
        commands = re.findall(r"^  ([a-z]+)\s", listed, re.M)
        self.assertIn("predict", commands)
        self.assertGreaterEqual(len(commands), 14)
        for command in commands:
            with self.subTest(command=command):
                self.assertIn(f'.SH "STRATA {command}"', page)
                section = page.split(f'.SH "STRATA {command}"')[1].split("\n.SH ")[0]
                # The option column of each line of its --help: "  -n,--network TEXT ...".
                options = []
                for line in strata(command, "--help").splitlines():
                    m = re.match(r"^  ((?:-\w,)?--[\w-]+(?:,--[\w-]+)*)", line)
                    if m:
                        options += [o for o in m.group(1).split(",") if o.startswith("--")]
                self.assertIn("--help", options)
                for option in options:
                    self.assertIn(option.replace("-", "\\-"), section, option)

    def test_man_renders_it_without_a_warning(self):
        if shutil.which("man") is None:
            self.skipTest("man is not installed")
        p = subprocess.run(["man", "--warnings=all", "-l", ARGS.man], capture_output=True,
                           text=True, env=dict(os.environ, MANWIDTH="100"), check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        self.assertIn("strata - how fast a network trains", p.stdout)
        self.assertIn("EXIT STATUS", p.stdout)


class Completion(unittest.TestCase):
    def test_subcommands(self):
        self.assertEqual(complete("strata", "pre"), ["predict"])
        self.assertEqual(complete("strata", "s"), ["sweep", "search", "simulate"])
        self.assertIn("--version", complete("strata", ""))

    def test_options_of_the_command(self):
        self.assertEqual(complete("strata", "predict", "--ov"), ["--overlap"])
        self.assertEqual(complete("strata", "sweep", "--ov"), ["--overlaps"])
        self.assertNotIn("--networks", complete("strata", "predict", "--net"))

    def test_option_values_from_the_enums(self):
        self.assertEqual(complete("strata", "predict", "--element", ""),
                         ["fp32", "tf32", "fp16", "bf16"])
        self.assertEqual(complete("strata", "predict", "-s", ""),
                         ["naive", "ring", "owt-a", "owt-b", "owt-c", "ps"])
        self.assertIn("all", complete("strata", "compare", "-s", ""))  # compare's -s is a list
        self.assertEqual(complete("strata", "predict", "--format", "j"), ["json"])
        self.assertEqual(complete("strata", "predict", "--schedule", ""),
                         ["gpipe", "1f1b", "interleaved"])
        self.assertEqual(complete("strata", "predict", "--engine", ""), ["model", "sim"])
        # A number: nothing offered (bash falls back to file names, -o default).
        self.assertEqual(complete("strata", "predict", "--workers", ""), [])

    def test_presets(self):
        networks = [line.split(",")[1] for line in strata("list", "--format", "csv").splitlines()
                    if line.startswith("network,")]
        self.assertEqual(complete("strata", "predict", "-n", ""), networks)
        self.assertEqual(complete("strata", "predict", "-n", "res"), ["resnet50"])
        self.assertIn("dgx-h100", complete("strata", "simulate", "--cluster", "dgx"))
        self.assertIn("tiny-gpt", complete("strata", "describe", "tiny"))
        self.assertEqual(complete("strata", "compare", "owt"), ["owt-k20"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--strata", required=True)
    parser.add_argument("--man", required=True)
    parser.add_argument("--completion", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest])
