#!/usr/bin/env python3
"""`import strata` against the CLI, its reference (docs/python.md).

Every preset network and cluster priced by the module and by `strata predict
--format json` gives the same JSON to the last bit; compare and sweep give the
CLI's --format csv rows; simulate and describe their --format json; a mistake
raises strata.Error with the CLI's one-line message (strata.ConfigError with
file, line and key for one in a file). Run by ctest with PYTHONPATH at the
built package and STRATA_BIN at the strata binary; exits 77 (skipped) with the
reason when the module was not built.
"""

import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import strata
except ImportError as e:  # the build found no pybind11: say why, skip
    print(f"skipped: the strata Python module is not built here ({e}); "
          "install pybind11-dev and python3-dev and build again", file=sys.stderr)
    sys.exit(77)

BIN = os.environ["STRATA_BIN"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args, ok=True):
    """Runs strata with args; its stdout (ok) or its stderr line (a mistake, exit 2)."""
    p = subprocess.run([BIN, *args], capture_output=True, text=True, check=False)
    if ok:
        if p.returncode != 0:
            raise AssertionError(f"strata {' '.join(args)} failed: {p.stderr}")
        return p.stdout
    if p.returncode != 2:
        raise AssertionError(f"strata {' '.join(args)}: exit {p.returncode}, expected 2")
    prefix = "strata: error: "
    line = p.stderr.strip()
    assert line.startswith(prefix), line
    return line[len(prefix):]


def csv_cell(v):
    """A record's value as the CLI's CSV writes it (study/src/csv.cpp)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        text = format(v, ".9g")
        return text
    return str(v)


class SameAsTheCli(unittest.TestCase):
    maxDiff = None

    def assert_rows_equal(self, records, csv_text):
        rows = list(csv.DictReader(io.StringIO(csv_text)))
        self.assertEqual(len(records), len(rows))
        for record, row in zip(records, rows):
            self.assertEqual(list(record), list(row))  # the same columns, in order
            for key, value in record.items():
                self.assertEqual(csv_cell(value), row[key], key)

    def test_presets(self):
        self.assertEqual(strata.presets(), json.loads(cli("list", "--format", "json")))

    def test_predict_every_network_preset(self):
        networks = strata.presets()["networks"]
        self.assertGreater(len(networks), 20)
        for n in networks:
            with self.subTest(network=n):
                self.assertEqual(
                    strata.predict(n, "dgx-h100", "ring", 8),
                    json.loads(cli("predict", "-n", n, "-c", "dgx-h100", "-s", "ring", "-k", "8",
                                   "--format", "json")))

    def test_predict_every_cluster_preset(self):
        for c in strata.presets()["clusters"]:
            with self.subTest(cluster=c):
                self.assertEqual(
                    strata.predict("resnet50", c, "ring", 2, batch=32, overlap=False),
                    json.loads(cli("predict", "-n", "resnet50", "-c", c, "-s", "ring", "-k", "2",
                                   "-b", "32", "--overlap", "off", "--format", "json")))

    def test_describe_every_network_preset(self):
        for n in strata.presets()["networks"]:
            with self.subTest(network=n):
                self.assertEqual(strata.describe(n, element="bf16"),
                                 json.loads(cli("describe", n, "--element", "bf16",
                                                "--format", "json")))

    def test_predict_with_options_and_a_training_run(self):
        # Every kind of value: a number, True/False, a string, a size, a list.
        cases = [
            (dict(fc_update="round"),
             ["-s", "owt-b", "-n", "alexnet-owt", "-c", "k20x8-pcie", "--fc-update", "round"]),
            (dict(tp=2, sequence_parallel=True, element="bf16", optimizer="adam", zero=1,
                  recompute="selective", batch=4),
             ["-s", "ring", "-n", "gpt3-xl", "-c", "dgx-a100", "--tp", "2",
              "--sequence-parallel", "on", "--element", "bf16", "--optimizer", "adam",
              "--zero", "1", "--recompute", "selective", "-b", "4"]),
            (dict(pp=2, microbatches=8, schedule="1f1b", batch=8, element="bf16",
                  stage_starts=["h.2.ln1"]),
             ["-s", "ring", "-n", "tiny-gpt", "-c", "dgx-a100", "--pp", "2", "--microbatches",
              "8", "--schedule", "1f1b", "-b", "8", "--element", "bf16", "--stage-starts",
              "h.2.ln1"]),
            (dict(staleness=1, ps_priority="fifo", segment="1MiB"),
             ["-s", "ps", "-n", "alexnet-owt", "-c", "k20x8-pcie", "--staleness", "1",
              "--ps-priority", "fifo", "--segment", "1MiB"]),
        ]
        for options, args in cases:
            kw = dict(options)
            strategy = args[args.index("-s") + 1]
            network = args[args.index("-n") + 1]
            cluster = args[args.index("-c") + 1]
            with self.subTest(options=options):
                self.assertEqual(
                    strata.predict(network, cluster, strategy, 8, **kw),
                    json.loads(cli("predict", *args, "-k", "8", "--format", "json")))
        self.assertEqual(
            strata.predict("gpt2-small", "dgx-h100", "ring", 8, batch=8, element="bf16",
                           optimizer="adam", epochs=1, dataset=1000000),
            json.loads(cli("predict", "-n", "gpt2-small", "-c", "dgx-h100", "-s", "ring", "-k",
                           "8", "-b", "8", "--element", "bf16", "--optimizer", "adam",
                           "--epochs", "1", "--dataset", "1000000", "--format", "json")))
        run = strata.predict("resnet50", "dgx-h100", "ring", 8, steps=1000)
        self.assertEqual(run["training"]["steps"], 1000)

    def test_the_engine_and_loaded_networks(self):
        net = strata.load_network(os.path.join(ROOT, "tests/fixtures/hf/gpt2/config.json"))
        self.assertEqual(net.params, 124439808)  # the published GPT-2 small
        cl = strata.load_cluster("dgx-h100")
        self.assertEqual(
            strata.predict(net, cl, "ring", 8, batch=4, engine="sim"),
            json.loads(cli("predict", "-n", os.path.join(ROOT, "tests/fixtures/hf/gpt2/config.json"),
                           "-c", "dgx-h100", "-s", "ring", "-k", "8", "-b", "4", "--engine",
                           "sim", "--format", "json")))

    def test_compare(self):
        self.assert_rows_equal(
            strata.compare("alexnet-owt", "k20x8-pcie", "all", [1, 2, 4, 8], batch=128),
            cli("compare", "-n", "alexnet-owt", "-c", "k20x8-pcie", "-s", "all", "-k", "1,2,4,8",
                "--format", "csv"))
        self.assert_rows_equal(
            strata.compare("resnet50", "dgx-h100", "naive,ring", (3, 5, 7), engine="sim"),
            cli("compare", "-n", "resnet50", "-c", "dgx-h100", "-s", "naive,ring", "-k", "3,5,7",
                "--engine", "sim", "--format", "csv"))

    def test_compare_an_experiment(self):
        self.assert_rows_equal(strata.compare(experiment="owt-k20"),
                               cli("compare", "owt-k20", "--format", "csv"))
        # The call's values override the file's, as the command line's do.
        self.assert_rows_equal(
            strata.compare(experiment="owt-k20", workers=[2, 8], strategies="ring,owt-c",
                           overlap=True, batch=64),
            cli("compare", "owt-k20", "-k", "2,8", "-s", "ring,owt-c", "--overlap", "on", "-b",
                "64", "--format", "csv"))
        self.assertEqual(Mistakes.message(lambda: strata.compare(cluster="dgx-h100")),
                         "network: required when no experiment is given")
        # A value from the file found wrong only when priced: its file, line and key.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "too-many.yaml")
            with open(path, "w") as f:
                f.write("name: too-many\nnetwork: alexnet-owt\ncluster: k20x8-pcie\n"
                        "strategies: [ring]\nworkers: [2, 16]\n")
            self.assertEqual(Mistakes.message(lambda: strata.compare(experiment=path)),
                             cli("compare", path, ok=False))

    def test_sweep(self):
        records = strata.sweep(["resnet50", "alexnet-owt", "gpt2-small"],
                               ["dgx-h100", "dgx-a100"], "ring,owt-a", [2, 8],
                               batches=[16, 64], overlaps=[True, False],
                               elements=["fp32", "bf16"])
        self.assert_rows_equal(records, cli(
            "sweep", "--networks", "resnet50,alexnet-owt,gpt2-small", "--clusters",
            "dgx-h100,dgx-a100", "--strategies", "ring,owt-a", "--workers", "2,8",
            "--batches", "16,64", "--overlaps", "on,off", "--elements", "fp32,bf16"))
        # owt-a on a network without a model-parallel part is left out, as by the CLI.
        self.assertEqual(len(records), (2 + 2 + 1) * 2 * 2 * 2 * 2 * 2)

    def test_search(self):
        def search_csv(*args):
            return cli("search", *args, "--format", "csv")

        self.assert_rows_equal(
            strata.search("gpt3-xl", "dgx-a100", 16, 64, element="bf16", optimizer="adam"),
            search_csv("-n", "gpt3-xl", "-c", "dgx-a100", "-k", "16", "--global-batch", "64",
                       "--element", "bf16", "--optimizer", "adam"))
        # Fixed dimensions: tp and the micro-batch size.
        records = strata.search("tiny-gpt", "dgx-a100", 12, 24, tp=2, batch=1)
        self.assert_rows_equal(records, search_csv("-n", "tiny-gpt", "-c", "dgx-a100", "-k", "12",
                                                   "--global-batch", "24", "--tp", "2", "-b",
                                                   "1"))
        self.assertTrue(all(" tp 2" in r["layout"] for r in records))
        self.assertEqual(
            Mistakes.message(lambda: strata.search("tiny-gpt", "dgx-a100", 12, 24,
                                                   microbatches=4)),
            "microbatches: search sets the micro-batches of each layout from global_batch / "
            "(dp x b); fix the micro-batch size with batch instead")
        self.assertEqual(
            Mistakes.message(lambda: strata.search("tiny-gpt", "dgx-a100", 12, 7, tp=1, pp=1)),
            cli("search", "-n", "tiny-gpt", "-c", "dgx-a100", "-k", "12", "--global-batch", "7",
                "--tp", "1", "--pp", "1", ok=False).replace("--global-batch", "global_batch"))

    def test_simulate(self):
        self.assertEqual(
            strata.simulate("resnet50", "dgx-h100", "ring", 8, stragglers={3: 1.5}, jitter=0.1,
                            seed=7),
            json.loads(cli("simulate", "-n", "resnet50", "-c", "dgx-h100", "-s", "ring", "-k",
                           "8", "--straggler", "3:1.5", "--jitter", "0.1", "--seed", "7",
                           "--format", "json")))
        self.assertEqual(
            strata.simulate("alexnet-owt", "k20x8-pcie", "ps", 4, ps_steps=4, staleness=1),
            json.loads(cli("simulate", "-n", "alexnet-owt", "-c", "k20x8-pcie", "-s", "ps", "-k",
                           "4", "--steps", "4", "--staleness", "1", "--format", "json")))

    def test_pandas_takes_the_records(self):
        try:
            import pandas
        except ImportError:
            self.skipTest("python3-pandas is not installed")
        frame = pandas.DataFrame(strata.compare("alexnet-owt", "k20x8-pcie"))
        self.assertEqual(len(frame), 6 * 4)
        best = frame.loc[frame.groupby("workers")["step_s"].idxmin()]
        self.assertEqual(list(best["workers"]), [1, 2, 4, 8])


class TheDocs(unittest.TestCase):
    def test_the_worked_example_prints_what_the_page_shows(self):
        try:
            import pandas  # noqa: F401  (the example uses it)
        except ImportError:
            self.skipTest("python3-pandas is not installed")
        with open(os.path.join(ROOT, "docs/python.md")) as f:
            page = f.read()

        def block_after(marker):
            start = page.index("```", page.index(marker))
            body = page.index("\n", start) + 1
            return page[body:page.index("```", body)]

        code = block_after("<!-- python example -->")
        shown = block_after("<!-- python example output -->")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           cwd=ROOT, check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, shown)


    def test_the_readme_line_prints_what_the_readme_shows(self):
        with open(os.path.join(ROOT, "README.md")) as f:
            lines = f.read().splitlines()
        prefix = '$ PYTHONPATH=build/python python3 -c "'
        i = next(i for i, line in enumerate(lines) if line.startswith(prefix))
        code = lines[i][len(prefix):-1]
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           cwd=ROOT, check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, lines[i + 1] + "\n")


class Mistakes(unittest.TestCase):
    @staticmethod
    def message(call):
        try:
            call()
        except strata.Error as e:
            return str(e)
        raise AssertionError("no strata.Error")

    def assert_error(self, call, message, kind=None):
        with self.assertRaises(kind or strata.Error) as caught:
            call()
        self.assertEqual(str(caught.exception), message)
        return caught.exception

    def test_the_same_message_as_the_cli(self):
        # Option mistakes name the keyword where the CLI names the flag.
        cases = [
            (lambda: strata.predict("alexnet-owt", "k20x8-pcie", "ring", 8, fc_update="round"),
             ["predict", "-n", "alexnet-owt", "-c", "k20x8-pcie", "-s", "ring", "-k", "8",
              "--fc-update", "round"], "fc_update", "--fc-update"),
            (lambda: strata.predict("alexnet-owt", "k20x8-pcie", "ring", 0),
             ["predict", "-n", "alexnet-owt", "-c", "k20x8-pcie", "-s", "ring", "-k", "0"],
             "workers", "--workers"),
            (lambda: strata.predict("alexnet-owt", "k20x8-pcie", "ring", 8, tp="x"),
             ["predict", "-n", "alexnet-owt", "-c", "k20x8-pcie", "-s", "ring", "-k", "8",
              "--tp", "x"], "tp", "--tp"),
            (lambda: strata.predict("no-such-net", "k20x8-pcie", "ring", 8),
             ["predict", "-n", "no-such-net", "-c", "k20x8-pcie", "-s", "ring", "-k", "8"],
             "network", "--network"),
            (lambda: strata.predict("alexnet-owt", "k20x8-pcie", "ring", 8, steps=10, epochs=1),
             ["predict", "-n", "alexnet-owt", "-c", "k20x8-pcie", "-s", "ring", "-k", "8",
              "--steps", "10", "--epochs", "1"], "steps", "--steps"),
            (lambda: strata.simulate("resnet50", "dgx-h100", "ring", 8, stragglers={9: 2}),
             ["simulate", "-n", "resnet50", "-c", "dgx-h100", "-s", "ring", "-k", "8",
              "--straggler", "9:2"], "stragglers", "--straggler"),
        ]
        for call, args, name, flag in cases:
            with self.subTest(args=args):
                expected = cli(*args, ok=False)
                self.assertTrue(expected.startswith(flag + ": "), expected)
                expected = name + expected[len(flag):]
                # The run's options, named in the message too, as keywords.
                for f in ["--steps", "--epochs", "--dataset"]:
                    expected = expected.replace(f, f[2:])
                self.assert_error(call, expected)

    def test_a_file_mistake_carries_file_line_and_key(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.yaml")
            with open(path, "w") as f:
                f.write("name: bad\ninput: {channels: 3, height: 32, width: 32}\n"
                        "layers:\n  - {name: fc, kind: fc, outputs: -4}\n")
            expected = cli("describe", path, ok=False)
            e = self.assert_error(lambda: strata.describe(path), expected, strata.ConfigError)
            self.assertEqual(e.file, path)
            self.assertEqual(e.line, 4)
            self.assertIsInstance(e.key, str)
            self.assertIn(e.key, expected)
            self.assertIsInstance(e, ValueError)

    def test_python_values_strata_cannot_take(self):
        self.assert_error(lambda: strata.predict("resnet50", "dgx-h100", "ring", 8, foo=1),
                          "foo: is not an option of strata (the options are batch, overlap, "
                          "fc_update, segment, bucket, element, optimizer, allreduce, conv_sync, "
                          "ps_priority, staleness, ps_servers, ps_node, threads_per_worker, tp, "
                          "sequence_parallel, zero, recompute, pp, microbatches, schedule, "
                          "virtual_stages, stage_starts, placement)")
        self.assert_error(lambda: strata.predict("resnet50", "dgx-h100", "ring", 8,
                                                 overlap={"on": 1}),
                          "overlap: must be a string, a number, True/False or a list of them, "
                          "got a dict")
        self.assert_error(lambda: strata.predict("resnet50", "dgx-h100", "ring", 8,
                                                 segment=float("nan")),
                          "segment: must be a finite number, got nan")
        self.assert_error(lambda: strata.compare("resnet50", "dgx-h100", "ring", []),
                          "workers: needs at least one value, got an empty list")
        self.assert_error(lambda: strata.predict(42, "dgx-h100", "ring", 8),
                          "network: must be a network preset name, a file path or a "
                          "strata.Network")
        self.assert_error(lambda: strata.predict("resnet50", "dgx-h100", "ring", 8, steps="10"),
                          "steps: must be a number")
        self.assert_error(lambda: strata.simulate("resnet50", "dgx-h100", "ring", 8,
                                                  stragglers=[3, 1.5]),
                          "stragglers: must be a dict {worker: slowdown}, e.g. {3: 1.5}")
        self.assert_error(lambda: strata.set_limits(max_workers=0),
                          "max_workers: must be a positive integer")

    def test_limits(self):
        try:
            strata.set_limits(max_workers=4)
            with self.assertRaises(strata.Error) as caught:
                strata.predict("resnet50", "dgx-h100", "ring", 8)
            self.assertIn("8 workers", str(caught.exception))
        finally:
            strata.set_limits()
        strata.predict("resnet50", "dgx-h100", "ring", 8)


if __name__ == "__main__":
    unittest.main()
