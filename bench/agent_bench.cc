// Agent hot paths at 8 GPUs × every field: one hardware tick against the mock NVML, and the
// /metrics rendering. The tick includes the time spent inside the mock NVML, so it is an upper
// bound on the agent's own cost (the target excludes time inside NVML).
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include "collect/nvml_source.h"
#include "server/agent.h"
#include "server/exposition.h"

namespace gpuwatch {
namespace {

const std::string kMock = std::string(GPUWATCH_BINARY_DIR) + "/libgpuwatch-mock-nvml.so";

std::unique_ptr<server::Agent> MakeAgent() {
  setenv("GPUWATCH_MOCK_NVML", "8xH100", 1);
  collect::NvmlSourceOptions o;
  o.library_path = kMock;
  server::AgentOptions ao;
  ao.hostname = "bench-node";
  auto agent = std::make_unique<server::Agent>(ao, std::make_unique<collect::NvmlSource>(o));
  if (!agent->Init().ok()) std::abort();
  return agent;
}

void BM_GpuTick8xH100(benchmark::State& state) {
  auto agent = MakeAgent();
  agent->TickGpu();
  for (auto _ : state) agent->TickGpu();
}
BENCHMARK(BM_GpuTick8xH100)->Unit(benchmark::kMicrosecond);

void BM_HostTick(benchmark::State& state) {
  auto agent = MakeAgent();
  for (auto _ : state) agent->TickHost();
}
BENCHMARK(BM_HostTick)->Unit(benchmark::kMicrosecond);

void BM_RenderMetrics8xH100(benchmark::State& state) {
  auto agent = MakeAgent();
  agent->TickGpu();
  agent->TickGpu();
  agent->TickHost();
  std::string out;
  for (auto _ : state) {
    agent->WithState([&](const server::AgentState& s) {
      server::RenderPrometheus(s, &out);
      return 0;
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["bytes"] = static_cast<double>(out.size());
}
BENCHMARK(BM_RenderMetrics8xH100)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpuwatch

BENCHMARK_MAIN();
