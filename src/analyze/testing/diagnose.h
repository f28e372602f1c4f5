// Test helpers for the diagnosis rules: short hand-made traces in the trace format, read through
// the real trace reader into the real engine. Include from *_test.cc files only.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analyze/diagnoser.h"
#include "trace/trace_reader.h"

namespace gpuwatch::analyze::testing {

// The findings of a whole trace (JSON lines), with the template baselines given.
inline std::vector<Finding> Diagnose(const std::string& jsonl,
                                     const std::vector<TemplateStep>& templates = {},
                                     DiagnoserOptions options = {}) {
  auto reader = trace::TraceReader::OpenBuffer(jsonl, "test.jsonl");
  EXPECT_TRUE(reader.ok()) << reader.status().message();
  if (!reader.ok()) return {};
  Diagnoser d(options);
  d.SetTemplateBaselines(templates);
  trace::TraceRecord r;
  double end = 0;
  while (true) {
    Result<bool> more = (*reader)->Next(&r);
    EXPECT_TRUE(more.ok()) << more.status().message();
    if (!more.ok() || !*more) break;
    d.Observe(r);
    end = r.t;
  }
  return d.Finish(end);
}

// A node record of node `node` with two H100-like GPUs linked by NVLink; `extra` adds fields
// (",\"nics\":[…]").
inline std::string Node(const std::string& node, double t, const std::string& extra = "") {
  return "{\"t\":" + std::to_string(t) + ",\"type\":\"node\",\"node\":\"" + node +
         "\",\"driver_version\":\"550.90.07\",\"gpus\":[{\"index\":0,\"max_sm_clock_mhz\":1980,"
         "\"pcie_max_gen\":5,\"pcie_max_width\":16,\"nvlink_count\":18},{\"index\":1,"
         "\"max_sm_clock_mhz\":1980,\"pcie_max_gen\":5,\"pcie_max_width\":16,\"nvlink_count\":18}],"
         "\"topology\":{\"gpu_links\":[[\"X\",\"NV18\"],[\"NV18\",\"X\"]]}" +
         extra + "}\n";
}

// A gpu record of node n1.
inline std::string Gpu(double t, int gpu, const std::string& fields) {
  return "{\"t\":" + std::to_string(t) +
         ",\"type\":\"gpu\",\"node\":\"n1\",\"gpu\":" + std::to_string(gpu) + "," + fields + "}\n";
}

// A step record of job j1 on n1 with a data wait.
inline std::string Step(double t, int rank, double duration, double data_wait) {
  return "{\"t\":" + std::to_string(t) +
         ",\"type\":\"step\",\"node\":\"n1\",\"job\":\"j1\","
         "\"rank\":" +
         std::to_string(rank) + ",\"duration_s\":" + std::to_string(duration) +
         ",\"data_wait_s\":" + std::to_string(data_wait) + "}\n";
}

// A step record of job j1 on n1 (rank r on GPU r) with exposed comm and a checkpoint.
inline std::string StepOf(double t, int rank, double duration, double comm, double ckpt = 0) {
  return "{\"t\":" + std::to_string(t) +
         ",\"type\":\"step\",\"node\":\"n1\",\"job\":\"j1\","
         "\"rank\":" +
         std::to_string(rank) + ",\"gpu\":" + std::to_string(rank) +
         ",\"duration_s\":" + std::to_string(duration) +
         ",\"data_wait_s\":0.01,\"comm_s\":" + std::to_string(comm) +
         ",\"checkpoint_s\":" + std::to_string(ckpt) + "}\n";
}

}  // namespace gpuwatch::analyze::testing
