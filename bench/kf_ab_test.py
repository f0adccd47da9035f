#!/usr/bin/env python3
"""Tests of bench/kf_ab.py against a stand-in kf-bench whose readings are known in advance.

The stand-in writes two op rows of one key, an elementwise row and a fusion row to the --json file it is
given. Each reading is a base for the variable's value plus the number of the call (0, 1, ...),
so the summary's order, pairing and differences can be checked exactly. KF_FAKE_FAIL makes it
exit 3 without writing (for the value it names) or mark its op row failed ("row").
Run: python3 bench/kf_ab_test.py (CTest: kf_ab_test_cpu).
"""

import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
KF_AB = os.path.join(HERE, "kf_ab.py")

def read(path):
    with open(path) as f:
        return f.read()


FAKE = r'''#!/usr/bin/env python3
import json, os, sys
state = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls")
calls = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(calls + 1))
value = os.environ.get("KF_FAKE", "unset")
with open(os.path.join(os.path.dirname(state), "seen"), "a") as f:
    f.write(value + " " + " ".join(sys.argv[1:]) + "\n")
fail = os.environ.get("KF_FAKE_FAIL", "")
if fail == value:
    sys.exit(3)
base = {"a": 80.0, "b": 85.0, "c": 90.0, "unset": 70.0}[value] + calls
doc = {"device": {"name": "Stand-in"}, "copy_ceiling": {"gbps": 1000.0},
       "op_rows": [{"op": "softmax", "variant": "scale=1", "dtype": "f32", "shape": [4, 8],
                    "percent_of_copy": base, "failed": fail == "row"},
                   {"op": "softmax", "variant": "scale=1", "dtype": "f32", "shape": [4, 8],
                    "percent_of_copy": base + 0.3, "failed": False}],
       "results": [{"op": "add", "activation": "relu", "bias": True, "dtype": "f16",
                    "shape": [2, 3], "size_class": "large", "percent_of_copy": base + 0.5,
                    "failed": False}],
       "fusion_rows": [{"case": "compile", "variant": "memory hit", "shape": "10 ops",
                        "percent_of_copy": 0, "us": 3.0 + calls, "failed": False}]}
json.dump(doc, open(sys.argv[sys.argv.index("--json") + 1], "w"))
'''


class KfAbTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kf_ab_test.")
        self.bench = os.path.join(self.dir, "fake-bench")
        with open(self.bench, "w") as f:
            f.write(FAKE)
        os.chmod(self.bench, os.stat(self.bench).st_mode | stat.S_IXUSR)
        self.out = os.path.join(self.dir, "out")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_ab(self, *args, env=None):
        full = {k: v for k, v in os.environ.items() if not k.startswith("KF_FAKE")}
        full.update(env or {})
        return subprocess.run([sys.executable, KF_AB, "--kf-bench", self.bench, "--out",
                               self.out, *args], env=full, capture_output=True, text=True)

    def table_row(self, text, key):
        line = next(line for line in text.splitlines() if line.startswith("| " + key + " |"))
        return [c.strip() for c in line.strip("|").split("|")]

    def test_order_rotates_and_differences_pair_by_pass(self):
        os.makedirs(self.out)
        with open(os.path.join(self.out, "pass1-v0-old.json"), "w") as f:
            f.write("{}")  # an earlier A/B's file in --out: neither read nor packed
        r = self.run_ab("--passes", "3", "KF_FAKE=a,b,c", "--", "--cuda", "--no-check")
        self.assertEqual(r.returncode, 0, r.stderr)
        seen = read(os.path.join(self.dir, "seen")).splitlines()
        self.assertEqual([s.split()[0] for s in seen], list("abcbcacab"))
        self.assertTrue(all(s.split()[1:3] == ["--cuda", "--no-check"] for s in seen))
        md = read(os.path.join(self.out, "ab.md"))
        self.assertIn("- pass 1: a -> b -> c", md)
        self.assertIn("- pass 2: b -> c -> a", md)
        self.assertIn("- pass 3: c -> a -> b", md)
        # Calls 0..8 in the order above: a ran as calls 0, 5, 7; b as 1, 3, 8; c as 2, 4, 6.
        row = self.table_row(md, "softmax scale=1 f32 4x8")
        self.assertEqual(row[1:], ["%", "80.0 / 85.0 / 87.0", "86.0 / 88.0 / 93.0",
                                   "92.0 / 94.0 / 96.0", "+3.0..+6.0", "+9.0..+12.0"])
        row = self.table_row(md, "softmax scale=1 f32 4x8 #2")  # the same key again
        self.assertEqual(row[2], "80.3 / 85.3 / 87.3")
        row = self.table_row(md, "add relu bias f16 2x3 large")
        self.assertEqual(row[2], "80.5 / 85.5 / 87.5")
        row = self.table_row(md, "compile memory hit 10 ops")
        self.assertEqual(row[1:3], ["us", "3.0 / 8.0 / 10.0"])
        self.assertEqual(md.count("| Stand-in | 1000.0 | 4 |"), 9)
        with tarfile.open(os.path.join(self.out, "ab.tar.gz")) as tar:
            names = tar.getnames()
        self.assertIn("ab.md", names)
        self.assertNotIn("pass1-v0-old.json", names)
        self.assertEqual(len([n for n in names if n.endswith(".json")]), 9)
        self.assertTrue(all(re.fullmatch(r"[A-Za-z0-9._-]+", n) for n in names), names)

    def test_unset_value_removes_the_variable(self):
        r = self.run_ab("KF_FAKE=-,b", "--", "--cpu", env={"KF_FAKE": "a"})
        self.assertEqual(r.returncode, 0, r.stderr)
        seen = [s.split()[0] for s in read(os.path.join(self.dir, "seen")).splitlines()]
        self.assertEqual(seen, ["unset", "b", "b", "unset"])
        md = read(os.path.join(self.out, "ab.md"))
        self.assertIn("KF_FAKE=(unset)", md)
        # unset: calls 0 and 3 (70, 73); b: calls 1 and 2 (86, 87).
        self.assertEqual(self.table_row(md, "softmax scale=1 f32 4x8")[2:],
                         ["70.0 / 73.0", "86.0 / 87.0", "+14.0..+16.0"])

    def test_a_failed_run_or_row_fails_the_ab(self):
        r = self.run_ab("KF_FAKE=a,b", "--", env={"KF_FAKE_FAIL": "b"})
        self.assertEqual(r.returncode, 1)
        self.assertIn("no readable JSON", r.stderr)
        md = read(os.path.join(self.out, "ab.md"))
        self.assertIn("| pass 1, KF_FAKE=b | 3 |", md)
        self.assertEqual(self.table_row(md, "softmax scale=1 f32 4x8")[2:],
                         ["80.0 / 83.0", "- / -", "-"])
        r = self.run_ab("KF_FAKE=a,b", "--", env={"KF_FAKE_FAIL": "row"})
        self.assertEqual(r.returncode, 1)
        self.assertIn("Rows whose check failed: softmax scale=1 f32 4x8 (KF_FAKE=a, pass 1)",
                      read(os.path.join(self.out, "ab.md")))

    def test_usage_errors(self):
        for args in (["KF_FAKE=a"], ["KF_FAKE=a,a"], ["KF_FAKE"], ["1X=a,b"], ["KF_FAKE=a,,b"],
                     ["KF_FAKE=a,b", "--", "--json", "x.json"], ["--passes", "0", "KF_FAKE=a,b"]):
            r = self.run_ab(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn("kf_ab.py: error:", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "seen")))
        r = subprocess.run([sys.executable, KF_AB, "--kf-bench", os.path.join(self.dir, "none"),
                            "KF_FAKE=a,b"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no kf-bench at", r.stderr)


if __name__ == "__main__":
    unittest.main()
