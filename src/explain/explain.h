// `gpuwatch explain`: the post-mortem from the text people already hold when a job has died —
// kernel logs, NCCL logs, launcher and training logs, nvidia-smi output, `nvidia-smi topo -m`,
// nccl-tests output (docs/format/explain.md). What each file is comes from its content, never
// its name; one file may hold several kinds. The files are read by the same parsers the live
// agent uses, and their lines go through the same diagnosis engine as `gpuwatch replay` (as log
// records of the kernel, the job and NCCL, on a node described by the nvidia-smi and topo -m
// files), so a cause explained from logs is the cause the engine would find live; an
// nvidia-smi snapshot is judged on its own (one sample of each GPU).
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "analyze/finding.h"
#include "common/status.h"
#include "nccl/nccl_analysis.h"
#include "topo/topo_text.h"

namespace gpuwatch::explain {

// docs/format/explain.md's table, in its order (the order of "kinds").
enum class Kind : uint8_t { kKernel, kNccl, kLauncher, kSmi, kTopology, kNcclTests };
std::string_view KindName(Kind k);

inline constexpr size_t kMaxFileBytes = size_t{256} << 20;  // decompressed

// A file's text: plain, or gzip by its magic bytes; at most kMaxFileBytes. Errors name the path
// and say why (missing, unreadable, a broken gzip stream, too large).
Result<std::string> ReadInput(const std::string& path);

struct InputFile {
  std::string path;
  std::string text;
};

struct Explanation {
  nlohmann::json document;  // {"files": [...], "node": "...", "findings": [...]}
  std::vector<analyze::Finding> findings;
};

// What the files say, each on its own and all together. `node`: the host when the text names
// none ("" for "unknown").
Explanation Explain(const std::vector<InputFile>& files, const std::string& node);

// What NCCL's analysis is told of a node by its `nvidia-smi topo -m` matrix: the GPU links, the
// NICs, and whether one is an RDMA NIC by its name (`gpuwatch nccl --topo` and explain).
nccl::TopoHint TopoHintOf(const topo::Topology& t);

// The text form: what each file holds, then the findings as `gpuwatch diagnose` prints them.
std::string RenderExplanation(const Explanation& e);

}  // namespace gpuwatch::explain
