#!/usr/bin/env python3
"""scripts/validation-table on a hand-written validate JSON (fixture.json: three rows, one
outside claims, one with the drift-cancelling fields and one without; its run record
fixture.run.json): the exact section it writes into a small page (expected.md), the page
left unchanged on every mistake, and a run through a stand-in for strata.
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "validation-table")
BEGIN = "<!-- validation-table:begin -->"
END = "<!-- validation-table:end -->"


def read(path):
    with open(path, newline="") as f:
        return f.read()


def write(path, text):
    with open(path, "w", newline="") as f:
        f.write(text)


class ValidationTable(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="validation-table-test.")
        self.page = os.path.join(self.tmp, "page.md")
        shutil.copy(os.path.join(HERE, "page.md"), self.page)
        self.json = os.path.join(self.tmp, "fixture.json")
        shutil.copy(os.path.join(HERE, "fixture.json"), self.json)
        shutil.copy(os.path.join(HERE, "fixture.run.json"),
                    os.path.join(self.tmp, "fixture.run.json"))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_script(self, *args, env=None):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                              env=env, cwd=self.tmp)

    def assert_refused(self, r, *needles):
        """Exit 2 and one line on stderr naming each of `needles`."""
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("scripts/validation-table: error: "), lines[0])
        for n in needles:
            self.assertIn(n, lines[0])

    def test_renders_the_fixture_exactly(self):
        r = self.run_script("--from", self.json, "--page", self.page)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"wrote 3 rows from {self.json} into {self.page}\n")
        expected = read(os.path.join(HERE, "expected.md"))
        self.assertEqual(read(self.page), expected)
        # Again on its own output: only what lies between the markers is replaced.
        r = self.run_script("--from", self.json, "--page", self.page)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(read(self.page), expected)

    def test_without_a_run_record_date_machine_commit_are_not_recorded(self):
        os.unlink(os.path.join(self.tmp, "fixture.run.json"))
        r = self.run_script("--from", self.json, "--page", self.page)
        self.assertEqual(r.returncode, 0, r.stderr)
        text = read(self.page)
        for line in ("- date: not recorded\n", "- machine: not recorded\n",
                     "- commit: not recorded\n", "- command: not recorded\n"):
            self.assertIn(line, text)
        # The figures are those of the run record's page.
        expected = read(os.path.join(HERE, "expected.md"))
        self.assertEqual(text[text.index("Rows: "):], expected[expected.index("Rows: "):])

    def test_a_page_without_markers_is_refused_and_left_unchanged(self):
        for text in ("# A page\n\nno markers\n",
                     f"# A page\n{BEGIN}\nno end\n",
                     f"# A page\n{END}\nin the\n{BEGIN}\nwrong order\n",
                     f"{BEGIN}\n{BEGIN}\ntwice\n{END}\n"):
            write(self.page, text)
            r = self.run_script("--from", self.json, "--page", self.page)
            self.assert_refused(r, "--page", self.page, BEGIN, END)
            self.assertEqual(read(self.page), text)
            # Before any run: the page is checked first.
            r = self.run_script("--page", self.page, "--out-dir", "out",
                                env=dict(os.environ, STRATA_BIN="/nonexistent/strata"))
            self.assert_refused(r, "--page")
            self.assertFalse(os.path.exists(os.path.join(self.tmp, "out")))

    def test_a_malformed_json_is_refused_and_the_page_left_unchanged(self):
        before = read(self.page)
        bad = os.path.join(self.tmp, "bad.json")
        write(bad, '{"rows": [')
        r = self.run_script("--from", bad, "--page", self.page)
        self.assert_refused(r, "--from", bad, "not JSON")
        self.assertEqual(read(self.page), before)
        # Valid JSON, not validate's: each names the key.
        data = json.loads(read(self.json))
        cases = [
            ([], "top level"),
            ({"summary": data["summary"]}, "top level.rows: missing"),
            ({"rows": [], "summary": data["summary"]}, "rows: no rows"),
            ({"rows": data["rows"]}, "top level.summary: missing"),
        ]
        row = json.loads(json.dumps(data["rows"][1]))
        del row["step_s"]
        cases.append(({"rows": [row], "summary": data["summary"]}, "rows[0].step_s: missing"))
        row = json.loads(json.dumps(data["rows"][0]))
        row["workers"] = "2"
        cases.append(({"rows": [row], "summary": data["summary"]},
                      'rows[0].workers: expected int, got "2"'))
        row = json.loads(json.dumps(data["rows"][0]))
        row["spread_s"] = {"min": 0.013, "max": 0.014}
        cases.append(({"rows": [row], "summary": data["summary"]},
                      "rows[0].spread_s: the measured step lies outside [min, max]"))
        row = json.loads(json.dumps(data["rows"][0]))
        row["raw_step_s"] = -1
        cases.append(({"rows": [row], "summary": data["summary"]},
                      "rows[0].raw_step_s: a time in seconds must be >= 0"))
        for content, needle in cases:
            write(bad, json.dumps(content))
            r = self.run_script("--from", bad, "--page", self.page)
            self.assert_refused(r, bad, needle)
            self.assertEqual(read(self.page), before)

    def test_a_malformed_run_record_is_refused(self):
        before = read(self.page)
        record = os.path.join(self.tmp, "fixture.run.json")
        for content, needle in (("[1]", "expected an object"),
                                ('{"duration_s": "long"}',
                                 'duration_s: expected a number, got "long"'),
                                ('{"machine": "x"}', 'machine: expected dict, got "x"'),
                                ("{", "not JSON")):
            write(record, content)
            r = self.run_script("--from", self.json, "--page", self.page)
            self.assert_refused(r, "--from", record, needle)
            self.assertEqual(read(self.page), before)

    def test_dry_run_changes_nothing(self):
        before = read(self.page)
        r = self.run_script("--from", self.json, "--page", self.page, "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(f"would replace lines 6-6 of {self.page} "), r.stdout)
        expected = read(os.path.join(HERE, "expected.md"))
        section = expected[expected.index(BEGIN) + len(BEGIN) + 1:expected.index(END)]
        self.assertTrue(r.stdout.endswith(section), r.stdout)
        self.assertEqual(read(self.page), before)
        r = self.run_script("--page", self.page, "--dry-run", "--repeats", "2", "--steps", "4",
                            "--out-dir", "out",
                            env=dict(os.environ, STRATA_BIN="/nonexistent/strata"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("would run: /nonexistent/strata validate --suite validation-full --format "
                      "json --out-dir out --repeats 2 --steps 4\n", r.stdout)
        self.assertIn(f"would write: {os.path.join('out', 'validation.json')}", r.stdout)
        self.assertEqual(read(self.page), before)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out")))

    def test_option_mistakes(self):
        before = read(self.page)
        self.assert_refused(self.run_script("--page", self.page, "--steps", "2"), "--steps")
        self.assert_refused(self.run_script("--page", self.page, "--repeats", "0"), "--repeats")
        self.assert_refused(
            self.run_script("--from", self.json, "--page", self.page, "--repeats", "2"), "--from")
        self.assert_refused(self.run_script("--from", "nope.json", "--page", self.page),
                            "--from", "nope.json")
        self.assert_refused(self.run_script("--from", self.json, "--page", "nope.md"),
                            "--page", "nope.md")
        self.assertEqual(read(self.page), before)

    def fake_strata(self, status):
        """A stand-in for strata: checks its arguments, prints the fixture, exits `status`."""
        path = os.path.join(self.tmp, "fake-strata")
        write(path, f"""#!{sys.executable}
import sys
args = sys.argv[1:]
assert args[:6] == ["validate", "--suite", "validation-full", "--format", "json",
                    "--out-dir"], args
assert args[7:] == ["--steps", "4"], args
sys.stdout.write(open({self.json!r}).read() if {status} == 0 else '{{"rows": [')
sys.exit({status})
""")
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return dict(os.environ, STRATA_BIN=path)

    def test_a_run_writes_json_run_record_and_page(self):
        r = self.run_script("--page", self.page, "--out-dir", "out", "--steps", "4",
                            env=self.fake_strata(0))
        self.assertEqual(r.returncode, 0, r.stderr)
        out = os.path.join(self.tmp, "out")
        self.assertEqual(json.loads(read(os.path.join(out, "validation.json"))),
                         json.loads(read(self.json)))
        record = json.loads(read(os.path.join(out, "validation.run.json")))
        self.assertEqual(record["command"],
                         "scripts/validation-table --page " + self.page +
                         " --out-dir out --steps 4")
        self.assertTrue(record["validate"].endswith(
            "validate --suite validation-full --format json --out-dir out --steps 4"))
        self.assertEqual(record["machine"]["cores"], os.cpu_count())
        self.assertFalse(os.path.exists(os.path.join(out, "validation.json.partial")))
        text = read(self.page)
        self.assertRegex(text, re.compile(
            r"^- date: \d{4}-\d\d-\d\d \d\d:\d\d UTC \(the run took \d+\.\d min\)$", re.M))
        self.assertRegex(text, re.compile(
            r"^- machine: .+, \d+ cores, [\d.]+ GiB memory, \S+ \S+$", re.M))
        self.assertRegex(text, re.compile(r"^- commit: ", re.M))
        expected = read(os.path.join(HERE, "expected.md"))
        self.assertEqual(text[text.index("Rows: "):], expected[expected.index("Rows: "):])
        self.assertTrue(text.startswith(expected[:expected.index(BEGIN) + len(BEGIN) + 1]))
        # --from renders the kept JSON with its run record: the same page.
        page2 = os.path.join(self.tmp, "page2.md")
        shutil.copy(os.path.join(HERE, "page.md"), page2)
        r = self.run_script("--from", os.path.join(out, "validation.json"), "--page", page2)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(read(page2).replace("from validation.json:", "from out/validation.json:"),
                         text)

    def test_a_failed_run_leaves_the_page_unchanged(self):
        before = read(self.page)
        r = self.run_script("--page", self.page, "--out-dir", "out", "--steps", "4",
                            env=self.fake_strata(1))
        self.assertEqual(r.returncode, 1)
        self.assertIn("strata validate failed (exit 1)", r.stderr)
        self.assertIn("is unchanged", r.stderr)
        self.assertEqual(read(self.page), before)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out", "validation.json")))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out", "validation.run.json")))


if __name__ == "__main__":
    unittest.main()
