// The task-level line (R5): what a training job tells the agent about itself through the job
// protocol (docs/job-protocol.md), as plain values. Parsed by collect/job_protocol.h, kept by
// collect/job_registry.h, written to traces as `job`, `step`, `event` and `log` records.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpuwatch::model {

enum class JobMessageType {
  kStart,       // a rank starts (or restarts): who it is
  kStep,        // one finished step
  kPhase,       // a phase mark: begin/end of "data", "comm", "checkpoint", "eval", …
  kCheckpoint,  // checkpoint begin/end
  kEnd,         // a rank ends, with its exit code
  kAnnotation,  // free text on the job's time line
  kLog,         // one line of the job's output, forwarded by the SDK
  kQueued,      // the job was submitted and waits (any sender: a launcher, the SDK)
  // The scheduler's word (root over the Unix socket only: the Slurm prolog/epilog, `gpuwatch
  // slurm`): the job holds these devices for this user and project from t / gives them back.
  kAllocation,
  kRelease,
};

// One finished step of one rank. Times are seconds; the parts are the portions of duration_s
// spent waiting for input, in exposed (not overlapped) communication and blocked on a
// checkpoint write.
struct StepReport {
  uint64_t step = 0;
  double duration_s = 0;
  std::optional<double> samples;
  std::optional<double> data_wait_s, comm_s, checkpoint_s;
  std::optional<double> loss, grad_norm;
  std::vector<std::pair<std::string, double>> scalars;  // custom, names [A-Za-z_][A-Za-z0-9_]*
};

struct JobMessage {
  JobMessageType type = JobMessageType::kStep;
  std::string job;
  uint32_t rank = 0;
  std::optional<double> t_s;  // the client's Unix time of the message (a step's end)

  // kStart
  std::string template_name, user, project;
  std::optional<uint32_t> world_size, local_rank;
  std::optional<uint32_t> pid;  // as the client sees it; the socket's credentials win
  std::vector<std::string> log_files;

  // kStep
  StepReport step;

  // kPhase, kCheckpoint: name ("checkpoint" for kCheckpoint) and begin (true) or end (false).
  std::string name;
  bool begin = true;

  // kEnd, kRelease
  std::optional<int> exit_code;

  // kAllocation: /dev/nvidiaN minor numbers (Slurm's SLURM_JOB_GPUS; not NVML indices) and
  // when the job was submitted (Unix seconds). user/project/template_name as for kStart.
  std::vector<uint32_t> devices;
  std::optional<double> submit_t_s;

  // kAnnotation (text), kLog (text = the line, stream = "stdout" | "stderr" | "").
  std::string text;
  std::string stream;
};

}  // namespace gpuwatch::model
