#!/usr/bin/env python3
"""scripts/gpu/step_summary.py on canned outputs (tests/gpu/fixtures/): each
step kind's key figure, and for failing steps the one line a developer needs.

The Catch2 fixtures are the output of Catch v2.13.10 programs (the version
the GPU test programs build with) run with `-d yes`; the others have the
shape of strata's, PyTorch's, nvidia-smi's and Google Benchmark's outputs.
"""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "gpu", "step_summary.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import step_summary  # noqa: E402


def fixture(name):
    with open(os.path.join(HERE, "fixtures", name)) as f:
        return f.read()


class Figures(unittest.TestCase):
    def check(self, kind, name, expected):
        self.assertEqual(step_summary.figure(kind, fixture(name)), expected)

    def test_catch2(self):
        self.check("test", "catch2-pass.txt", "16 test cases, 308906 assertions passed")
        self.check("test", "catch2-mismatch.txt",
                   "2 of 3 test cases failed, 2 of 3 assertions failed")
        self.check("test", "catch2-timeout.txt", None)

    def test_run_step_time_and_loss(self):
        self.check("run", "run-pass.txt", "step 11.9 ms, loss 6.9312 -> 6.8011")
        self.check("run", "run-cuda-error.txt", None)

    def test_predict(self):
        self.check("predict", "predict.txt", "predicted step 31.4 ms")

    def test_torch_median(self):
        self.check("torch", "torch-pass.txt",
                   "median step 9.83 ms (min 9.70, max 10.20 ms), bf16, momentum, "
                   "61100840 parameters")
        self.check("torch", "torch-oom.txt", None)

    def test_allreduce(self):
        self.check("allreduce", "allreduce-k2.txt",
                   "avg busbw ring 266.10 GB/s, naive 293.40 GB/s")
        # One worker: no bandwidth, the largest size's times.
        self.check("allreduce", "allreduce-k1.txt",
                   "256 MiB: ring 0.1 us, naive 0.0 us, nccl 101.3 us")

    def test_validate(self):
        self.check("validate", "validate.txt",
                   "|error| over 24 rows: model median 28.6 %, worst 64.6 %; "
                   "simulator median 29.0 %, worst 64.3 %")

    def test_calibrate(self):
        self.check("calibrate", "calibrate.txt",
                   "memory 2.73 TB/s copy, 932 GB/s summed; host link 55.0 GB/s; "
                   "link alpha 12.7 us, beta 1.38 TB/s (fit within 8 %), two workers on GPU 0")

    def test_profile_bench_gpu(self):
        self.check("profile", "profile.txt", "total 162 ms")
        self.assertEqual(step_summary.figure(
            "profile", "total 11.0 ms measured, 13.8 ms priced (+25 %)\n"),
            "total 11.0 ms, priced 13.8 ms (+25 %)")
        self.check("bench", "bench-abort.txt", "3 benchmarks")
        self.check("gpu", "gpu.txt", "NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 0 MiB")
        self.assertIsNone(step_summary.figure(
            "gpu", "timeout: failed to run command 'nvidia-smi': No such file or directory"))

    def test_describe(self):
        self.assertEqual(step_summary.figure(
            "describe", '{"layers": [{}, {}, {}], "totals": {"params": 134912}}'),
            "3 layers, 134912 parameters")
        self.assertIsNone(step_summary.figure("describe", "strata: error: no network 'x'"))


class Why(unittest.TestCase):
    def check(self, kind, status, name, expected, limit=None):
        self.assertEqual(step_summary.why(kind, status, fixture(name), limit), expected)

    def test_catch2_first_mismatching_element(self):
        self.check("test", 1, "catch2-mismatch.txt",
                   "fc on cuBLAS equals the CPU's: flatten, per position, model-parallel slices: "
                   "/work/strata/tests/executor/nn/cuda_backend_test.cpp:9: n := 3; element 17 "
                   "of 216: cpu 0.125, gpu 0.625, tolerance 0.0001 [REQUIRE( worstDiff <= "
                   "tolerance ) with 0.5 <= 0.0001] (+1 more failed test case)")

    def test_catch2_exception_unwrapped(self):
        # Catch2 wraps the message at 79 columns; the line joins it back.
        self.check("test", 1, "catch2-exception.txt",
                   "device communicator: ring and naive allreduce of device memory sum exactly: "
                   "/work/strata/tests/executor/runtime/runtime_cuda_test.cpp:4: cudaMemcpyAsync "
                   "(ring step 1, rank 2): cudaErrorIllegalAddress (an illegal memory access was "
                   "encountered)")

    def test_catch2_timeout_names_the_last_finished_case(self):
        self.check("test", 124, "catch2-timeout.txt",
                   "timed out after 150 s; last finished test case: conv on cuDNN (heuristic "
                   "algorithms) equals the CPU's", limit="150")

    def test_catch2_skip_is_no_gpu(self):
        self.check("test", 77, "catch2-skip.txt",
                   "no usable GPU (the program skipped itself); skipped: no usable CUDA device "
                   "(cudaGetDeviceCount: cudaErrorNoDevice (no CUDA-capable device is detected))")

    def test_strata_error_names_the_call(self):
        self.check("run", 1, "run-cuda-error.txt",
                   "strata: error: worker 0: cublasGemmStridedBatchedEx (fwd h.1.attn scores, "
                   "8 x 12 heads): CUBLAS_STATUS_NOT_SUPPORTED")

    def test_python_exception_last_line(self):
        self.check("torch", 1, "torch-cuda-error.txt",
                   "RuntimeError: CUDA error: an illegal memory access was encountered")
        self.check("torch", 1, "torch-oom.txt",
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.53 GiB. GPU 0 "
                   "has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including "
                   "non-PyTorch memory, this process has 78.16 GiB memory in use.")
        self.check("torch", 1, "torch-shape.txt",
                   "last line: torch_step.py: layer 'h.1.attn' gives [768, 1024, 1], strata says "
                   "[768, 512, 1]")

    def test_uncaught_exception_and_signal(self):
        self.check("bench", 134, "bench-abort.txt",
                   "killed by SIGABRT; uncaught exception: cudaMallocAsync (kernels_bench buffer "
                   "of 256 MiB): cudaErrorMemoryAllocation (out of memory)")
        self.check("run", 139, "segfault.txt",
                   "killed by SIGSEGV; last line: step 1/12 loss 6.9312 step time 812 ms")

    def test_command_not_found(self):
        text = "timeout: failed to run command 'nvidia-smi': No such file or directory\n"
        self.assertEqual(step_summary.why("gpu", 127, text),
                         "command not found; last line: timeout: failed to run command "
                         "'nvidia-smi': No such file or directory")

    def test_cuda_status_without_a_strata_line(self):
        text = "loading\nwarning: slow path\nncclUnhandledCudaError: Call to CUDA function failed.\n" \
               "bye\n"
        self.assertEqual(step_summary.why("run", 1, text),
                         "ncclUnhandledCudaError: Call to CUDA function failed.")

    def test_no_output_and_length_cap(self):
        self.assertEqual(step_summary.why("run", 1, ""), "no output")
        line = step_summary.why("run", 1, "strata: error: " + "x" * 1000)
        self.assertEqual(len(line), 400)
        self.assertTrue(line.endswith("..."))


class CommandLine(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)

    def test_two_lines_figure_then_why(self):
        r = self.run_script("run", "1", os.path.join(HERE, "fixtures", "run-cuda-error.txt"))
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout.splitlines(),
                         ["-", "strata: error: worker 0: cublasGemmStridedBatchedEx (fwd h.1.attn "
                          "scores, 8 x 12 heads): CUBLAS_STATUS_NOT_SUPPORTED"])
        r = self.run_script("run", "0", os.path.join(HERE, "fixtures", "run-pass.txt"))
        self.assertEqual(r.stdout.splitlines(), ["step 11.9 ms, loss 6.9312 -> 6.8011", ""])

    def test_usage(self):
        r = self.run_script("run")
        self.assertEqual(r.returncode, 2)
        self.assertIn("step_summary.py KIND STATUS OUTPUT", r.stderr)


if __name__ == "__main__":
    unittest.main()
