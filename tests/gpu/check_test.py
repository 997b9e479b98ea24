#!/usr/bin/env python3
"""scripts/gpu/check (gpu-bundle/check) without a GPU.

--dry-run from the checkout: every step is walked and listed in summary.txt
in the plan's order with "skipped (dry run)", the steps issue #31 asks for
are there (smoke first), the estimate fits the budget, and every option the
steps give `strata SUB` exists in `strata SUB --help` of this build (values,
such as --element bf16 on run, are the CLI's to check), every option given
to torch_step.py exists in its argparse.

Then the real path with a fake bundle (a `run` that prints canned outputs,
fails, or hangs; a fake nvidia-smi and python): each step's line, figure and
reason; a hang killed at what is left of the budget; the later steps skipped
for the budget; summary.txt and the tarball already written while a step
runs.

  check_test.py --strata build/cli/strata
"""
import argparse
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHECK = os.path.join(ROOT, "scripts", "gpu", "check")
STRATA = None  # from --strata

ROW = re.compile(r"^(\S+) +\| (exit \d+(?: \(timed out\))?|skipped \((?:dry run|budget)\)) +\| "
                 r"+(\d+\.\d) s \| (.+)$")


def rows(summary):
    """(name, status, seconds, figure, why or None) per step line of a summary."""
    out = []
    for line in summary.splitlines():
        if line.startswith("    why: "):
            name, status, seconds, figure, _ = out[-1]
            out[-1] = (name, status, seconds, figure, line[len("    why: "):])
            continue
        if line.startswith("#"):
            continue
        m = ROW.match(line)
        if not m:
            raise AssertionError(f"summary line of no known form: {line!r}")
        out.append((m.group(1), m.group(2), float(m.group(3)), m.group(4), None))
    return out


def listed_plan():
    """(group, name, est, limit, command) of every step, from check --list."""
    r = subprocess.run([CHECK, "--list"], capture_output=True, text=True, check=True)
    plan = []
    for line in r.stdout.splitlines()[:-1]:
        m = re.match(r"^(\S+) +(\S+) +est +(\d+) s +limit +(\d+) s +(.*)$", line)
        assert m, line
        plan.append((m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), m.group(5)))
    return plan, r.stdout.splitlines()[-1]


class DryRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp()
        env = dict(os.environ, OUT=cls.out)
        env.pop("PYTHON", None)
        cls.result = subprocess.run([CHECK, "--dry-run"], capture_output=True, text=True,
                                    env=env, timeout=120)
        with open(os.path.join(cls.out, "summary.txt")) as f:
            cls.summary = f.read()
        cls.plan, cls.plan_total = listed_plan()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out)

    def test_exits_0_and_lists_every_step_in_order(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        got = rows(self.summary)
        self.assertEqual([r[0] for r in got], [p[1] for p in self.plan])
        for name, status, seconds, figure, why in got:
            self.assertEqual(status, "skipped (dry run)", name)
            self.assertEqual(seconds, 0.0)
            self.assertIsNone(why)
        for (_, name, est, limit, _), row in zip(self.plan, got):
            self.assertEqual(row[3], f"est {est} s, limit {limit} s")
            self.assertLess(est, limit, name)

    def test_header_and_footer(self):
        lines = self.summary.splitlines()
        self.assertRegex(lines[0], r"^# strata GPU check \(\S+\), started \d{4}-\d\d-\d\dT"
                                   r"\d\d:\d\d:\d\dZ; groups: smoke backend precision strategies "
                                   r"extra$")
        n = len(self.plan)
        m = re.match(r"^# plan: (\d+) steps, estimated (\d+) s \(extra: (\d+) s, in what the "
                     r"budget leaves\), budget (\d+) s; DRY RUN: nothing ran$", lines[1])
        self.assertIsNotNone(m, lines[1])
        steps, total, extra, budget = map(int, m.groups())
        self.assertEqual(steps, n)
        self.assertEqual(total, sum(p[2] for p in self.plan))
        self.assertEqual(extra, sum(p[2] for p in self.plan if p[0] == "extra"))
        # Everything but extra fits the 420 s budget: the call ends within 7 minutes.
        self.assertEqual(budget, 420)
        self.assertLessEqual(total - extra, budget)
        self.assertRegex(lines[-1], rf"^# done: {n} of {n} steps: 0 passed, 0 failed, {n} "
                                    r"skipped; \d+ s$")
        self.assertEqual(self.plan_total, f"{n} steps, estimated {total} s (budget 420 s)")

    def test_commands_printed(self):
        printed = [line for line in self.result.stdout.splitlines()
                   if line.startswith("[dry run] ")]
        self.assertEqual(len(printed), len(self.plan))
        def same_work_dir(text):  # each walk has a mktemp folder of its own
            return re.sub(r"/tmp\.\w+/", "/WORK/", text).rstrip()

        for line, (_, name, _, _, command) in zip(printed, self.plan):
            self.assertEqual(same_work_dir(line), same_work_dir(f"[dry run] {name}: {command}"))

    def test_tarball_holds_every_output(self):
        archive = os.path.join(
            self.out, "check-smoke-backend-precision-strategies-extra.tar.gz")
        with tarfile.open(archive) as t:
            names = {os.path.normpath(n) for n in t.getnames()}
        self.assertIn("summary.txt", names)
        for _, name, _, _, _ in self.plan:
            self.assertIn(f"{name}.txt", names)

    def test_the_steps_issue_31_asks_for(self):
        groups = {}
        for group, name, _, _, command in self.plan:
            groups.setdefault(group, []).append((name, command))
        order = [p[0] for p in self.plan]
        # Smoke first: the GPU test programs, then one short run of each kind.
        self.assertEqual(order[:len(groups["smoke"])], ["smoke"] * len(groups["smoke"]))
        self.assertEqual([n for n, _ in groups["smoke"][:4]],
                         ["gpu", "kernels_cuda_test", "nn_cuda_test", "runtime_cuda_test"])
        commands = {p[1]: p[4] for p in self.plan}
        for net in ("tiny-gpt", "gpt2-small", "alexnet-owt", "resnet50"):
            self.assertIn("--device cuda", commands[f"run-{net}"])
            self.assertIn(f"{net}.describe.json", commands[f"torch-{net}"])
        for net in ("alexnet-owt", "resnet50", "gpt2-small"):
            for el in ("bf16", "tf32"):
                self.assertIn(f"--element {el}", commands[f"run-{net}-{el}"])
                self.assertIn(f"--{el}", commands[f"torch-{net}-{el}"])
                run_batch = re.search(r"--batch (\d+)", commands[f"run-{net}-{el}"]).group(1)
                torch_batch = re.search(r"--batch (\d+)", commands[f"torch-{net}-{el}"]).group(1)
                self.assertEqual(run_batch, torch_batch)
        self.assertTrue(any("--optimizer adam" in c for c in commands.values()))
        self.assertIn("calibrate --device cuda", commands["calibrate"])
        self.assertIn("validate --device cuda", commands["validate"])
        # Every step of the three groups that ran before (2026-11-25) is still there.
        for name in ("run-k1", "run-ring-k2", "run-ps-k2", "allreduce-k2-small", "kernels_bench",
                     "run-vgg16", "torch-vgg16", "profile-vgg16", "profile-resnet50",
                     "run-alexnet-owt-ring-k2", "run-alexnet-owt-owt-c-k4", "allreduce-k1",
                     "allreduce-k4", "predict-vgg16", "predict-resnet50"):
            self.assertIn(name, commands)

    def test_only_brings_what_a_step_reads(self):
        r = subprocess.run([CHECK, "--list", "--only", "torch-gpt2-small-bf16,predict-vgg16"],
                           capture_output=True, text=True, check=True)
        names = [line.split()[1] for line in r.stdout.splitlines()[:-1]]
        self.assertEqual(names, ["describe-gpt2-small", "torch-gpt2-small-bf16", "calibrate",
                                 "predict-vgg16"])
        r = subprocess.run([CHECK, "--list", "smoke", "--only", "validate"], capture_output=True,
                           text=True, check=True)
        self.assertEqual(r.stdout.splitlines()[-1], "0 steps, estimated 0 s (budget 420 s)")

    def test_options_exist(self):
        """Every option of a strata command is in its subcommand's --help; every
        option of a torch_step.py command is one torch_step.py defines."""
        if STRATA is None:
            self.skipTest("no --strata")
        helps = {}
        with open(os.path.join(ROOT, "scripts", "gpu", "torch_step.py")) as f:
            torch_options = set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', f.read()))
        self.assertIn("--bf16", torch_options)
        for _, name, _, _, command in self.plan:
            words = command.split()
            if "strata" in words:
                sub = words[words.index("strata") + 1]
                if sub not in helps:
                    r = subprocess.run([STRATA, sub, "--help"], capture_output=True, text=True)
                    self.assertEqual(r.returncode, 0, f"strata {sub} --help")
                    helps[sub] = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", r.stdout))
                known = helps[sub]
            elif any(w.endswith("torch_step.py") for w in words):
                known = torch_options
            else:
                continue
            for w in words:
                if w.startswith("-") and not re.match(r"^-?\d", w):
                    self.assertIn(w, known, f"step {name}: {w} is not an option of: {command}")


FAKE_RUN = r"""#!/usr/bin/env bash
# A bundle's run for the test: canned outputs by the command line.
fixtures=%(fixtures)r
case "$*" in
  "nn_cuda_test -d yes") cat "$fixtures/catch2-mismatch.txt"; exit 1 ;;
  "strata run -n alexnet-owt -s ring -k 1 "*) cat "$fixtures/run-pass.txt" ;;
  "strata run -n alexnet-owt -s ps -k 2 "*) cat "$fixtures/run-cuda-error.txt"; exit 1 ;;
  "strata run -n tiny-gpt "*) echo "step    1/6  loss   6.7549  step time 40.1 ms"; exec sleep 30 ;;
  "strata describe alexnet-owt --format json") echo '{"layers": [{}, {}], "totals": {"params": 61100840}}' ;;
  *) echo "fake run: unexpected command: $*" >&2; exit 3 ;;
esac
"""
FAKE_PYTHON = r"""#!/usr/bin/env bash
# PyTorch's step for the test: the describe file must be there.
[[ -s "$2" ]] || { echo "fake python: no $2" >&2; exit 1; }
cat %(fixtures)r/torch-pass.txt
"""
FAKE_SMI = """#!/usr/bin/env bash
cat %(fixtures)r/gpu.txt
"""


class FakeBundle(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        fixtures = os.path.join(HERE, "fixtures")
        bundle = os.path.join(self.tmp, "gpu-bundle")
        os.makedirs(os.path.join(bundle, "bin"))
        os.makedirs(os.path.join(self.tmp, "scripts", "gpu"))
        os.makedirs(os.path.join(self.tmp, "fake"))
        for f in ("check", "step_summary.py"):
            shutil.copy(os.path.join(ROOT, "scripts", "gpu", f), bundle)
        for path, text in ((os.path.join(bundle, "run"), FAKE_RUN),
                           (os.path.join(self.tmp, "fake", "python"), FAKE_PYTHON),
                           (os.path.join(self.tmp, "fake", "nvidia-smi"), FAKE_SMI)):
            with open(path, "w") as f:
                f.write(text % {"fixtures": fixtures})
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        with open(os.path.join(bundle, "VERSION"), "w") as f:
            f.write("abc1234\n")
        self.check = os.path.join(bundle, "check")
        self.out = os.path.join(self.tmp, "out")
        self.env = dict(os.environ, OUT=self.out, PYTHON=os.path.join(self.tmp, "fake", "python"),
                        PATH=os.path.join(self.tmp, "fake") + os.pathsep + os.environ["PATH"])

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def summary(self):
        with open(os.path.join(self.out, "summary.txt")) as f:
            return f.read()

    def test_figures_reasons_and_the_describe_file(self):
        r = subprocess.run([self.check, "--only", "gpu,nn_cuda_test,run-k1,run-ps-k2,"
                            "describe-alexnet-owt,torch-alexnet-owt", "--budget", "120"],
                           capture_output=True, text=True, env=self.env, timeout=120)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        s = self.summary()
        self.assertTrue(s.startswith("# strata GPU check (abc1234), started "), s)
        got = {row[0]: row for row in rows(s)}
        self.assertEqual(list(got), ["gpu", "nn_cuda_test", "run-k1", "run-ps-k2",
                                     "describe-alexnet-owt", "torch-alexnet-owt"])
        self.assertEqual(got["gpu"][1:2] + got["gpu"][3:],
                         ("exit 0", "NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 0 MiB", None))
        self.assertEqual(got["nn_cuda_test"][1], "exit 1")
        self.assertEqual(got["nn_cuda_test"][3], "2 of 3 test cases failed, 2 of 3 assertions "
                                                 "failed")
        self.assertIn("element 17 of 216: cpu 0.125, gpu 0.625", got["nn_cuda_test"][4])
        self.assertEqual(got["run-k1"][1:2] + got["run-k1"][3:],
                         ("exit 0", "step 11.9 ms, loss 6.9312 -> 6.8011", None))
        self.assertEqual(got["run-ps-k2"][4], "strata: error: worker 0: cublasGemmStridedBatchedEx "
                                              "(fwd h.1.attn scores, 8 x 12 heads): "
                                              "CUBLAS_STATUS_NOT_SUPPORTED")
        self.assertEqual(got["describe-alexnet-owt"][3], "2 layers, 61100840 parameters")
        self.assertEqual(got["torch-alexnet-owt"][1], "exit 0")
        self.assertTrue(got["torch-alexnet-owt"][3].startswith("median step 9.83 ms"))
        self.assertRegex(s.splitlines()[-1],
                         r"^# done: 6 of 6 steps: 4 passed, 2 failed, 0 skipped; \d+ s$")
        # The describe JSON went to its own file (the torch step read it), the
        # step's output has only its stderr.
        with tarfile.open(os.path.join(self.out, "check-smoke-backend-precision-strategies-"
                                                 "extra.tar.gz")) as t:
            names = {os.path.normpath(n) for n in t.getnames()}
            self.assertIn("alexnet-owt.describe.json", names)
            self.assertEqual(t.extractfile("./describe-alexnet-owt.txt").read(), b"")
            self.assertIn(b"cublasGemmStridedBatchedEx", t.extractfile("./run-ps-k2.txt").read())

    def test_a_hang_is_killed_at_the_budget_and_the_summary_is_there_meanwhile(self):
        budget = 6
        p = subprocess.Popen([self.check, "smoke", "backend", "--only",
                              "gpu,run-k1,run-tiny-gpt-k1,describe-alexnet-owt",
                              "--budget", str(budget)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=self.env, start_new_session=True)
        try:
            # While the hanging step runs, summary.txt has the steps before it
            # and names the one running; the tarball is there too.
            deadline = time.time() + 20
            while time.time() < deadline:
                if os.path.exists(os.path.join(self.out, "summary.txt")) and \
                        "# running: run-tiny-gpt-k1" in self.summary():
                    break
                time.sleep(0.1)
            s = self.summary()
            self.assertRegex(s.splitlines()[-1], r"^# running: run-tiny-gpt-k1 \(limit \d s, "
                                                 r"started \d\d:\d\d:\d\d\)$")
            self.assertEqual([r[0] for r in rows(s)], ["gpu", "run-k1"])
            self.assertTrue(os.path.exists(os.path.join(self.out, "check-smoke-backend.tar.gz")))
            output, _ = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        self.assertEqual(p.returncode, 1, output)
        got = {row[0]: row for row in rows(self.summary())}
        hang = got["run-tiny-gpt-k1"]
        self.assertEqual(hang[1], "exit 124 (timed out)")
        self.assertLessEqual(hang[2], budget + 1)
        self.assertRegex(hang[4], r"^timed out after \d s; last line: step 1/6 loss 6\.7549 "
                                  r"step time 40\.1 ms$")
        self.assertEqual(got["describe-alexnet-owt"][1], "skipped (budget)")
        self.assertRegex(got["describe-alexnet-owt"][3], r"^est 1 s, 0 s of the budget left$")
        self.assertRegex(self.summary().splitlines()[-1],
                         r"^# done: 4 of 4 steps: 2 passed, 1 failed, 1 skipped; \d+ s$")
        self.assertIn("run-tiny-gpt-k1", output)

    def test_usage_mistakes(self):
        for args, message in ((["--budget", "0"], "--budget: '0' is not a whole number"),
                              (["gpus"], "unknown group 'gpus'"),
                              (["--bogus"], "unknown option '--bogus'")):
            r = subprocess.run([self.check, *args], capture_output=True, text=True, env=self.env)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(message, r.stderr)
        # No bundle beside it and none in the checkout: only a dry run can go on.
        lone = os.path.join(self.tmp, "lone", "scripts", "gpu", "check")
        os.makedirs(os.path.dirname(lone))
        shutil.copy(self.check, lone)
        r = subprocess.run([lone], capture_output=True, text=True, env=self.env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no bundle at", r.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", help="strata binary, for the options check")
    args, rest = ap.parse_known_args()
    STRATA = args.strata
    unittest.main(argv=[sys.argv[0]] + rest)
