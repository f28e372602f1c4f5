import os
import unittest

import gpuwatch
from gpuwatch import _env
from gpuwatch._transport import candidate_paths, parse_address

from tests.support import CaptureSender


def client(environ, **kw):
    return gpuwatch.Client(environ=environ, _sender=CaptureSender(), **kw)


class RankTest(unittest.TestCase):
    def test_torchrun(self):
        env = {"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "run-42",
               "MASTER_ADDR": "node1", "MASTER_PORT": "29500"}
        self.assertEqual(_env.detect_rank(env), (5, 16, 1))
        self.assertEqual(_env.detect_job(env), "run-42")

    def test_torchrun_default_run_id_is_not_a_job(self):
        env = {"RANK": "0", "TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500"}
        self.assertEqual(_env.detect_job(env), "10.0.0.7:29500")

    def test_slurm(self):
        env = {"SLURM_JOB_ID": "123456", "SLURM_PROCID": "7", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3"}
        self.assertEqual(_env.detect_rank(env), (7, 8, 3))
        self.assertEqual(_env.detect_job(env), "123456")

    def test_torchrun_inside_slurm(self):
        # The rank is torchrun's; the job is the allocation's.
        env = {"SLURM_JOB_ID": "99", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0",
               "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "TORCHELASTIC_RUN_ID": "abc"}
        self.assertEqual(_env.detect_rank(env), (3, 4, 3))
        self.assertEqual(_env.detect_job(env), "99")

    def test_open_mpi(self):
        env = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
               "PMIX_NAMESPACE": "prterun-node1-12345@1"}
        self.assertEqual(_env.detect_rank(env), (2, 4, 0))
        self.assertEqual(_env.detect_job(env), "prterun-node1-12345@1")

    def test_mpich_pmi(self):
        env = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}
        self.assertEqual(_env.detect_rank(env), (1, 2, 1))

    def test_pbs_and_lsf(self):
        self.assertEqual(_env.detect_job({"PBS_JOBID": "4711.pbs01"}), "4711.pbs01")
        self.assertEqual(_env.detect_job({"LSB_JOBID": "815"}), "815")

    def test_gpuwatch_job_wins(self):
        self.assertEqual(_env.detect_job({"GPUWATCH_JOB": "mine", "SLURM_JOB_ID": "1"}), "mine")

    def test_nothing_set(self):
        self.assertEqual(_env.detect_rank({}), (None, None, None))
        self.assertEqual(_env.detect_job({}, hostname="gpu7", pid=4242), "gpu7-4242")

    def test_garbage_values_are_skipped(self):
        env = {"RANK": "x", "OMPI_COMM_WORLD_RANK": "-1", "SLURM_PROCID": " 4 "}
        self.assertEqual(_env.detect_rank(env)[0], 4)

    def test_job_sanitized(self):
        self.assertEqual(_env.sanitize_job(" a\x00b\nc\x7f "), "abc")
        self.assertEqual(_env.sanitize_job("\x01\x02"), None)
        long_id = "é" * 100  # 200 bytes of UTF-8
        cut = _env.sanitize_job(long_id)
        self.assertEqual(len(cut.encode("utf-8")), 128)
        self.assertEqual(cut, "é" * 64)


class ClientIdentityTest(unittest.TestCase):
    def test_explicit_arguments_win(self):
        env = {"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "SLURM_JOB_ID": "1"}
        c = client(env, job="explicit", rank=2, world_size=4, local_rank=0, user="bob",
                   template="llama", project="nlp", log_files=["rel.log", "/abs/x.log"])
        start = c._sender.messages("start")[0]
        self.assertEqual(start, {
            "type": "start", "v": 1, "job": "explicit", "rank": 2, "template": "llama", "user": "bob",
            "project": "nlp", "world_size": 4, "local_rank": 0, "pid": os.getpid(),
            "log_files": [os.path.abspath("rel.log"), "/abs/x.log"]})

    def test_environment_used(self):
        c = client({"SLURM_JOB_ID": "77", "SLURM_PROCID": "3", "SLURM_NTASKS": "4"})
        self.assertEqual((c.job, c.rank, c.world_size, c.local_rank), ("77", 3, 4, None))
        start = c._sender.messages("start")[0]
        self.assertNotIn("local_rank", start)
        self.assertEqual(start["user"], _env.login_name())

    def test_rank_out_of_range(self):
        c = client({}, rank=2 ** 21)
        self.assertEqual(c.rank, 0)
        self.assertEqual(c.rejected, 1)

    def test_at_most_16_log_files(self):
        c = client({}, log_files=["/l/%d" % i for i in range(20)])
        self.assertEqual(len(c._sender.messages("start")[0]["log_files"]), 16)


class AddressTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_address("/run/x.sock"), ("unix", "/run/x.sock"))
        self.assertEqual(parse_address("unix:///run/x.sock"), ("unix", "/run/x.sock"))
        self.assertEqual(parse_address("udp://127.0.0.1:9471"), ("udp", ("127.0.0.1", 9471)))
        self.assertEqual(parse_address("tcp://[::1]:9471"), ("tcp", ("::1", 9471)))
        for bad in ("udp://host", "tcp://:1", "udp://h:0", "udp://h:x", ""):
            with self.assertRaises(ValueError, msg=bad):
                parse_address(bad)

    def test_candidates(self):
        self.assertEqual(candidate_paths({"XDG_RUNTIME_DIR": "/run/user/1000"}, uid=1000), [
            "/run/gpuwatch/job.sock", "/run/user/1000/gpuwatch/job.sock", "/tmp/gpuwatch-1000/job.sock"])
        self.assertEqual(candidate_paths({}, uid=7), ["/run/gpuwatch/job.sock", "/tmp/gpuwatch-7/job.sock"])

    def test_bad_address_never_raises(self):
        c = gpuwatch.Client(job="j", socket="udp://nope", environ={})
        with c.step():
            pass
        c.flush()
        self.assertIn("bad address", c.address)
        self.assertEqual(c.sent, 0)
        self.assertEqual(c.dropped, 3)  # start; then start again (resent after a failure) + step
        c.close()


if __name__ == "__main__":
    unittest.main()
