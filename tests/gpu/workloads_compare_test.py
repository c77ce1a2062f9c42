#!/usr/bin/env python3
"""The GPU check's comparison of native and gpool runs, on synthetic results (no GPU, no PyTorch)."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402


def write(d, name, record):
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump(dict(record, name=name), f)


class Compare(unittest.TestCase):
    def setUp(self):
        self.native = tempfile.mkdtemp()
        self.gpool = tempfile.mkdtemp()

    def rows(self):
        return workloads.compare(self.native, self.gpool)

    def test_identical_results_match_and_timings_give_a_ratio(self):
        rec = {"ok": True, "values": {"losses": {"dtype": "fp32", "data": [2.3, 2.1, 1.9]}}, "timings": {"step_s": 0.010}}
        write(self.native, "mlp", rec)
        write(self.gpool, "mlp", dict(rec, timings={"step_s": 0.011}))
        rows, ok = self.rows()
        self.assertTrue(ok)
        self.assertEqual(rows[0][3], "same")
        self.assertEqual(rows[1][6], "1.10x")

    def test_tolerance_follows_the_dtype(self):
        write(self.native, "a", {"ok": True, "values": {"v": {"dtype": "bf16", "data": [1.0, 2.0]}}})
        write(self.gpool, "a", {"ok": True, "values": {"v": {"dtype": "bf16", "data": [1.01, 2.0]}}})
        write(self.native, "b", {"ok": True, "values": {"v": {"dtype": "fp32", "data": [1.0, 2.0]}}})
        write(self.gpool, "b", {"ok": True, "values": {"v": {"dtype": "fp32", "data": [1.01, 2.0]}}})
        rows, ok = self.rows()
        self.assertFalse(ok)
        self.assertEqual([r[3] for r in rows], ["same", "DIFFERENT"])
        self.assertIn("differs: v", rows[1][7])

    def test_a_failure_or_a_missing_result_is_reported(self):
        write(self.native, "x", {"ok": True, "values": {}})
        write(self.gpool, "x", {"ok": False, "error": "RuntimeError: CUDA error"})
        write(self.native, "y", {"ok": True, "values": {}})
        rows, ok = self.rows()
        self.assertFalse(ok)
        self.assertEqual(rows[0][2], "FAIL")
        self.assertIn("CUDA error", rows[0][7])
        self.assertIn("no result", rows[1][7])

    def test_strings_and_ints_compare_exactly(self):
        self.assertTrue(workloads.close(["H100"], ["H100"], "str"))
        self.assertFalse(workloads.close([3, 4], [3, 5], "int"))
        self.assertFalse(workloads.close([1.0], [1.0, 2.0], "fp32"))


if __name__ == "__main__":
    unittest.main()
