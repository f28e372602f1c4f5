#include "logs/log_classify.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace gpuwatch::logs {
namespace {

namespace fs = std::filesystem;
using Kind = LogLineClass::Kind;
using Severity = LogLineClass::Severity;

Kind K(std::string_view line) { return ClassifyLogLine(line).kind; }
bool Nccl(std::string_view line) { return ClassifyLogLine(line).nccl; }

// ---- NCCL debug output ----------------------------------------------------------------------

TEST(ClassifyLogLineTest, NcclDebugLineForms) {
  EXPECT_TRUE(Nccl("node2:14159:14168 [0] NCCL INFO NCCL_IB_HCA set to mlx5_4"));
  EXPECT_TRUE(Nccl("XXX:430:2237 [0] include/topo.h:27 NCCL WARN Could not find real path"));
  EXPECT_TRUE(Nccl("[1,3]<stdout>:gpu6:1410:1605 [3] NCCL INFO NET/Plugin : No plugin found"));
  EXPECT_TRUE(
      Nccl(" 2025-02-18 12:54 ncivki7qpk7pmo1btv0h0:180:915 [7] NCCL INFO misc/socket.cc:47 -> 3"));
  EXPECT_TRUE(Nccl("h:1:2 [-1] NCCL TRACE x"));
  EXPECT_TRUE(Nccl("h:1:2 [0] NCCL INFO"));  // nothing after the level
  EXPECT_TRUE(Nccl("NCCL version 2.18.5+cuda12.0"));
  EXPECT_TRUE(Nccl("[1,0]<stdout>:NCCL version 2.4.2+cuda10.0"));

  EXPECT_FALSE(Nccl("INFO 09-12 23:40:47 pynccl.py:63] vLLM is using nccl==2.20.5"));
  EXPECT_FALSE(Nccl("Using NCCL version 2.18.5+cuda12.0 in the build"));
  EXPECT_FALSE(Nccl("NCCL version 2.18.5"));  // the bare form always names its CUDA
  EXPECT_FALSE(Nccl("NCCL INFO without the host:pid:tid prefix"));
  EXPECT_FALSE(Nccl("host:pid:tid [0] NCCL INFO x"));  // pid and tid are numbers
  EXPECT_FALSE(Nccl("h:1:2 [x] NCCL INFO x"));
  EXPECT_FALSE(Nccl("h:1:2 [0] NCCL INFORMATION"));
  EXPECT_FALSE(Nccl("h:1:2 [0] not/a-file NCCL WARN x"));
  EXPECT_FALSE(
      Nccl("#  Rank  0 Group  0 Pid   2274 on definitley-not-a-banana device  0 [0000:01:00] "
           "NVIDIA RTX 6000 Ada Generation"));
  EXPECT_FALSE(
      Nccl("[rank7]:[E816 01:45:40.18 ProcessGroupNCCL.cpp:607] [Rank 7] Watchdog caught "
           "collective operation timeout: WorkNCCL(SeqNum=80078)"));
}

TEST(ClassifyLogLineTest, NcclInfoIsNotAnErrorEvenWhenItSaysError) {
  for (const char* line : {
           "h:1:2 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.",
           "h:1:2 [0] NCCL INFO Comm config error_handling=1 blocking=0",
           "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
           "h:1:2 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open "
           "shared object file: No such file or directory",
           "h:1:2 [0] NCCL INFO ERROR_HANDLING enabled",
           "h:1:2 [0] NCCL INFO misc/socket.cc:47 -> 0",
       }) {
    const LogLineClass c = ClassifyLogLine(line);
    EXPECT_TRUE(c.nccl) << line;
    EXPECT_EQ(c.kind, Kind::kNone) << line << " → " << LogLineKindName(c.kind);
    EXPECT_EQ(c.severity, Severity::kNone) << line;
  }
}

TEST(ClassifyLogLineTest, NcclWarnAndErrorTrace) {
  // The two titles INDEX.md quotes for nccltests#185 and nccl#1052, with NCCL's prefix.
  LogLineClass c = ClassifyLogLine(
      "dgxh100-4:460770:460842 [0] transport/net_ib.cc:1033 NCCL WARN Call to ibv_modify_qp "
      "failed with error Network is unreachable");
  EXPECT_TRUE(c.nccl);
  EXPECT_EQ(c.kind, Kind::kNcclWarn);
  EXPECT_EQ(c.severity, Severity::kWarning);
  EXPECT_EQ(K("node2:14159:14170 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
              "from peer 10.10.10.3<43466> with error 4, opcode 0, len 0, vendor err 81 (Recv)"),
            Kind::kNcclWarn);
  EXPECT_EQ(K("XXX:430:2237 [0] NCCL INFO init.cu:864 -> 2"), Kind::kNcclError);
  EXPECT_EQ(K("XXX:430:2237 [0] NCCL INFO misc/group.cu:69 -> 2 [Async thread]"), Kind::kNcclError);
  EXPECT_EQ(ClassifyLogLine("XXX:430:2237 [0] NCCL INFO init.cu:864 -> 2").severity,
            Severity::kError);
  // A WARN that names a specific failure takes that kind.
  EXPECT_EQ(K("h:1:2 [0] enqueue.cc:100 NCCL WARN Cuda failure 'an illegal memory access was "
              "encountered'"),
            Kind::kCudaError);
  EXPECT_EQ(K("h:1:2 [0] proxy.cc:1 NCCL WARN [Service thread] Error encountered progressing "
              "operation=Connect, res=3, closing connection"),
            Kind::kNcclWarn);
  EXPECT_EQ(K("h:1:2 [0] net.cc:1 NCCL WARN NET/Socket : socket progress timeout"),
            Kind::kNcclTimeout);
}

// ---- hand-written lines, one group per kind -------------------------------------------------

TEST(ClassifyLogLineTest, NcclTimeout) {
  for (const char* line : {
           "[rank7]:[E816 01:45:40.183009389 ProcessGroupNCCL.cpp:607] [Rank 7] Watchdog caught "
           "collective operation timeout: WorkNCCL(SeqNum=80078, OpType=BROADCAST, NumelIn=5056, "
           "NumelOut=5056, Timeout(ms)=600000) ran for 600026 milliseconds before timing out.",
           "[E ProcessGroupNCCL.cpp:475] Some NCCL operations have failed or timed out. Due to the "
           "asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/"
           "incomplete data.",
           "[rank0]:[E ProcessGroupNCCL.cpp:1182] [Rank 0] Timeout at NCCL work: 4, last enqueued "
           "NCCL work: 4, last completed NCCL work: 3.",
           "[rank3]:[E1101 ProcessGroupNCCL.cpp:1418] [PG 0 Rank 3] Heartbeat monitor timed out! "
           "Process will be terminated after dumping debug info.",
           "[rank3]:[F1101 ProcessGroupNCCL.cpp:1224] [PG 0 Rank 3] ProcessGroupNCCL's watchdog "
           "got stuck for 480 seconds without making progress in monitoring enqueued collectives.",
           "RuntimeError: NCCL communicator was aborted on rank 3. Original reason for failure "
           "was: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)",
       }) {
    const LogLineClass c = ClassifyLogLine(line);
    EXPECT_EQ(c.kind, Kind::kNcclTimeout) << line << " → " << LogLineKindName(c.kind);
    EXPECT_EQ(c.severity, Severity::kCritical);
    EXPECT_FALSE(c.nccl) << "PyTorch's lines are not NCCL debug output";
  }
  // Settings that mention a timeout are not one.
  EXPECT_EQ(K("Setting NCCL timeout to 1800 s"), Kind::kNone);
  EXPECT_EQ(K("[PG 0 Rank 0] ProcessGroupNCCL initialization options: size: 8, global rank: 0, "
              "TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0"),
            Kind::kNone);
  EXPECT_EQ(K("export NCCL_TIMEOUT=1800"), Kind::kNone);
}

TEST(ClassifyLogLineTest, CudaError) {
  for (const char* line : {
           "RuntimeError: CUDA error: an illegal memory access was encountered",
           "[rank2]: RuntimeError: CUDA error: unspecified launch failure",
           "RuntimeError: CUDA error: device-side assert triggered",
           "terminate called after throwing an instance of 'c10::Error' what():  CUDA error: "
           "misaligned address",
           "RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, "
           "opa, opb, m, n, k, &falpha, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c)`",
           "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
           "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA_ERROR_ILLEGAL_ADDRESS",
           "Got cudaErrorIllegalAddress in kernel launch",
           "RuntimeError: cuda runtime error (710) : device-side assert triggered at "
           "/pytorch/aten/src/THC/generic/THCTensorMath.cu:29",
           "RuntimeError: No CUDA GPUs are available / CUDA driver error: no CUDA-capable device "
           "is detected",
           "an illegal instruction was encountered",
       }) {
    const LogLineClass c = ClassifyLogLine(line);
    EXPECT_EQ(c.kind, Kind::kCudaError) << line << " → " << LogLineKindName(c.kind);
    EXPECT_EQ(c.severity, Severity::kCritical);
  }
  EXPECT_EQ(K("cublas returned CUBLAS_STATUS_SUCCESS"), Kind::kNone);
  EXPECT_EQ(K("CUDNN_STATUS_SUCCESS"), Kind::kNone);
  EXPECT_EQ(K("CUDA kernel errors might be asynchronously reported at some other API call, so "
              "the stacktrace below might be incorrect."),
            Kind::kNone);
}

TEST(ClassifyLogLineTest, Oom) {
  for (const char* line : {
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
           "total capacity of 79.10 GiB of which 1.06 GiB is free.",
           "[rank1]: torch.cuda.OutOfMemoryError: CUDA out of memory.",
           "RuntimeError: CUDA error: out of memory",
           "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
           "tensor with shape[8192,8192]",
           "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying "
           "to allocate 17179869184 bytes.",
           "Out of memory: Killed process 48213 (python3) total-vm:98123456kB, anon-rss:"
           "91234567kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:180000kB oom_score_adj:0",
           "Memory cgroup out of memory: Killed process 1234 (pt_main_thread)",
           "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.0. Some of your "
           "processes may have been killed by the cgroup out-of-memory handler.",
           "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), "
           "order=0, oom_score_adj=0",
           "MemoryError: Unable to allocate 74.5 GiB for an array with shape (10000000000,)",
           "terminate called after throwing an instance of 'std::bad_alloc'",
           "h:1:2 [0] alloc.h:1 NCCL WARN Cuda failure 'out of memory'",
       }) {
    const LogLineClass c = ClassifyLogLine(line);
    EXPECT_EQ(c.kind, Kind::kOom) << line << " → " << LogLineKindName(c.kind);
    EXPECT_EQ(c.severity, Severity::kCritical);
  }
}

TEST(ClassifyLogLineTest, NcclError) {
  for (const char* line : {
           "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
           "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
           "details), NCCL version 2.19.3",
           "RuntimeError: NCCL error in: /opt/pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, "
           "unhandled cuda error, NCCL version 2.7.8",
           "ncclRemoteError: A call failed possibly due to a network error or a remote process "
           "exiting prematurely.",
           "Last error: remote process exited or there was a network error",
           "ncclInternalError: Internal check failed.",
           "[rank1]:[E1101] ProcessGroupNCCL.cpp:1500] NCCL communicator was aborted on rank 1.",
       }) {
    const LogLineClass c = ClassifyLogLine(line);
    EXPECT_EQ(c.kind, Kind::kNcclError) << line << " → " << LogLineKindName(c.kind);
    EXPECT_EQ(c.severity, Severity::kError);
  }
}

TEST(ClassifyLogLineTest, Xid) {
  const LogLineClass c = ClassifyLogLine(
      "[93297.027938] NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics "
      "Exception: ESR 0x52e7b0=0x101000e");
  EXPECT_EQ(c.kind, Kind::kXid);
  EXPECT_EQ(c.severity, Severity::kCritical);
  // An Xid about an OOM-ish text is still an Xid: the driver line wins.
  EXPECT_EQ(K("NVRM: Xid (PCI:0000:18:00): 31, pid=1, name=x, Ch 0, out of memory"), Kind::kXid);
  EXPECT_EQ(K("XidCriticalError: Xid=69 on Device=GPU-7540a9b3, the device will go unhealthy."),
            Kind::kError);
}

TEST(ClassifyLogLineTest, Traceback) {
  const LogLineClass c = ClassifyLogLine("Traceback (most recent call last):");
  EXPECT_EQ(c.kind, Kind::kTraceback);
  EXPECT_EQ(c.severity, Severity::kError);
  EXPECT_EQ(K("[rank0]: Traceback (most recent call last):"), Kind::kTraceback);
  EXPECT_EQ(K("  File \"train.py\", line 55, in <module>"), Kind::kNone);
}

TEST(ClassifyLogLineTest, GenericError) {
  for (const char* line : {
           "2024-05-01 12:00:00,123 ERROR trainer: checkpoint upload failed",
           "ERROR: could not open dataset shard 17",
           "[ERROR] rank 3 lost its dataloader worker",
           "+> [Fri Aug 30 11:11:22 2024] nvidia-peermem nv_get_p2p_free_callback:127 ERROR "
           "detected invalid context, skipping further processing",
           "srun: error: node17: task 3: Exited with exit code 1",
           "error: unrecognized arguments: --lr",
           "ValueError: too many values to unpack (expected 2)",
           "[rank0]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
           "KeyError: 'model_state'",
           "[1,0]<stderr>:FileNotFoundError: [Errno 2] No such file or directory: 'ckpt.pt'",
           "E0816 01:45:40.183009 12345 trainer.cc:42] step failed",
           "    [rank7]:[E816 01:45:40.184373931 ProcessGroupGloo.cpp:1664] rank 7 failed",
           "FATAL: kernel too old",
           "AssertionError:",
       }) {
    const LogLineClass c = ClassifyLogLine(line);
    EXPECT_EQ(c.kind, Kind::kError) << line << " → " << LogLineKindName(c.kind);
    EXPECT_EQ(c.severity, Severity::kError);
  }
}

TEST(ClassifyLogLineTest, LinesThatMustNotBeErrors) {
  for (const char* line : {
           "",
           "epoch 3 step 1200 loss=0.0 error rate 0.013",
           "validation: 0 errors, 0 warnings",
           "Mean Absolute Error: 0.1234",
           "val_error: 0.31 train_error: 0.12",
           "error_count=0 error_rate=0.0",
           "TORCH_NCCL_ASYNC_ERROR_HANDLING: 3",
           "INFO: no ERRORS found in 128 shards",
           "[INFO] retrying after transient error (attempt 1/5)",
           "Using error feedback for gradient compression",
           "Step 10 | Errors: none",
           "Elapsed 0:01:02 ETA 0:20:00",
           "#  Rank  7 Group  0 Pid 1936469 on    node031 device  7 [0xd1] NVIDIA GeForce RTX 4090",
           "Epoch 12/100: 100%|##########| 500/500 [01:02<00:00,  8.01it/s]",
           "E2E latency 12 ms",
           "ERRORS: 0",
       }) {
    const LogLineClass c = ClassifyLogLine(line);
    EXPECT_EQ(c.kind, Kind::kNone) << "'" << line << "' → " << LogLineKindName(c.kind);
    EXPECT_EQ(c.severity, Severity::kNone) << line;
    EXPECT_FALSE(c.nccl) << line;
  }
}

TEST(ClassifyLogLineTest, Names) {
  EXPECT_EQ(LogLineKindName(Kind::kNcclTimeout), "nccl_timeout");
  EXPECT_EQ(LogLineKindName(Kind::kOom), "oom");
  EXPECT_EQ(LogLineKindName(Kind::kError), "error");
  EXPECT_EQ(LogSeverityName(Severity::kCritical), "critical");
  EXPECT_EQ(LogSeverityName(Severity::kNone), "none");
}

// ---- the real NCCL logs in ../shared/real/nccl -------------------------------------------------

std::string RealNcclDir() { return std::string(GPUWATCH_SOURCE_DIR) + "/../shared/real/nccl"; }

std::vector<std::string> FileLines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(ClassifyRealNcclLogsTest, NcclLineCountsAndEveryNotableLine) {
  if (!fs::is_directory(RealNcclDir())) {
    GTEST_SKIP() << RealNcclDir() << " is absent: real-capture tests need ../shared";
  }
  // NCCL debug lines per file, counted independently with
  //   grep -cE '[^ ]+:[0-9]+:[0-9]+ \[-?[0-9]+\] ([^ ]+:[0-9]+ )?NCCL (INFO|WARN|TRACE)( |$)|
  //             ^(.*:)? *NCCL version [0-9][^ ]*\+cuda'
  // Header lines ("#  Rank …"), PyTorch watchdog lines, vLLM/Ray lines, a shell prompt and a
  // Python traceback are not NCCL output.
  const std::map<std::string, size_t> want_nccl = {
      {"aikitoria38_4090_plus_rtx6000ada_nccl2312_no_ib_socket.log", 14},
      {"nccl1052_h800_2node_roce_mlx5_4_completion_error.log", 14},
      {"nccl1235_4gpu_node_p2p_ipc_read_multinode_error.log", 15},
      {"nccl1409_watchdog_broadcast_vs_allreduce_mismatch.log", 0},
      {"nccl1538_k8s_worker_p2p_cumem.log", 11},
      {"nccl1609_h800_4rank_nvls_timeout_issue.log", 10},
      {"nccl1610_watchdog_alltoall_timeout_socket_errors.log", 3},
      {"nccl1817_8gpu_single_process_p2p_direct_pointer_p2p_slower_than_shm.log", 11},
      {"nccl224_horovod_mpirun_roce_34nics_nccl242.log", 7},
      {"nccl707_a100_ib_mixed_roce_p2p_loc_shm_disabled_gdr_fail.log", 7},
      {"nccl892_h800_8gpu_single_process_trees_ring_order.log", 8},
      {"nccltests185_dgxh100_2node_roce_ibv_modify_qp_unreachable.log", 13},
      {"nccltests213_8rank_1node_comm_trees.log", 6},
      {"nccltests287_2x5090_socket_nccl2251_error.log", 11},
      {"nccltests307_8x4090_roce_bond_slow_allreduce.log", 17},
      {"pytorch40273_2gpu_socket_nccl_warn_topo_realpath_unhandled_system_error.log", 15},
      {"vllm8447_2node_pp_ib_hang.log", 7},
  };
  // Every line that is classified as something, by (file, 1-based line); all others: kNone.
  const std::string pt =
      "pytorch40273_2gpu_socket_nccl_warn_topo_realpath_unhandled_system_error.log";
  const std::string w1610 = "nccl1610_watchdog_alltoall_timeout_socket_errors.log";
  const std::string w1409 = "nccl1409_watchdog_broadcast_vs_allreduce_mismatch.log";
  const std::map<std::pair<std::string, size_t>, Kind> want_kind = {
      {{pt, 9}, Kind::kNcclWarn},       {{pt, 10}, Kind::kNcclError},
      {{pt, 11}, Kind::kNcclError},     {{pt, 12}, Kind::kNcclError},
      {{pt, 13}, Kind::kNcclError},     {{pt, 14}, Kind::kTraceback},
      {{pt, 19}, Kind::kNcclWarn},      {{pt, 20}, Kind::kNcclError},
      {{pt, 21}, Kind::kNcclError},     {{w1610, 1}, Kind::kNcclTimeout},
      {{w1610, 2}, Kind::kNcclTimeout}, {{w1610, 3}, Kind::kNcclTimeout},
      {{w1610, 4}, Kind::kNcclTimeout}, {{w1610, 5}, Kind::kNcclError},
      {{w1610, 6}, Kind::kNcclError},   {{w1610, 7}, Kind::kNcclError},
      {{w1409, 1}, Kind::kNcclTimeout}, {{w1409, 2}, Kind::kNcclTimeout},
      {{w1409, 3}, Kind::kNcclTimeout},
  };
  size_t files = 0, total_nccl = 0, warns = 0;
  for (const auto& entry : fs::directory_iterator(RealNcclDir())) {
    const std::string name = entry.path().filename().string();
    const auto lines = FileLines(entry.path());
    size_t nccl = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      const LogLineClass c = ClassifyLogLine(lines[i]);
      nccl += c.nccl;
      auto it = want_kind.find({name, i + 1});
      const Kind want = it == want_kind.end() ? Kind::kNone : it->second;
      EXPECT_EQ(c.kind, want) << name << ":" << i + 1 << " " << lines[i] << " → "
                              << LogLineKindName(c.kind);
      if (c.kind == Kind::kNcclWarn) {
        ++warns;
        EXPECT_TRUE(c.nccl);
        EXPECT_NE(lines[i].find("include/topo.h:27 NCCL WARN Could not find real path"),
                  std::string::npos);
      }
    }
    auto it = want_nccl.find(name);
    ASSERT_NE(it, want_nccl.end()) << "new file in ../shared/real/nccl: " << name;
    EXPECT_EQ(nccl, it->second) << name;
    total_nccl += nccl;
    ++files;
  }
  EXPECT_EQ(files, want_nccl.size());
  EXPECT_EQ(total_nccl, 169u);
  EXPECT_EQ(warns, 2u);
}

}  // namespace
}  // namespace gpuwatch::logs
