// libFuzzer target for the PromQL parser and evaluator: query text arrives over HTTP from
// anyone who can reach the agent, so no input may crash, hang or exhaust memory. Queries that
// parse are also evaluated, instant and over a short range, against a small in-memory store.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "query/engine.h"
#include "query/promql.h"
#include "query/testing/memory_querier.h"

namespace {

const gpuwatch::query::testing::MemoryQuerier& Store() {
  static const auto* q = [] {
    using gpuwatch::store::Label;
    auto* m = new gpuwatch::query::testing::MemoryQuerier;
    for (int gpu = 0; gpu < 2; ++gpu) {
      std::vector<gpuwatch::store::Sample> util, energy;
      for (int i = 0; i < 120; ++i) {
        const int64_t t = 1'700'000'000'000 + i * 15'000;
        util.push_back({t, static_cast<double>((i * 7 + gpu * 13) % 100)});
        energy.push_back({t, static_cast<double>(i % 50) * 1000});  // resets every 50
      }
      const std::string g = std::to_string(gpu);
      m->Add({{"__name__", "DCGM_FI_DEV_GPU_UTIL"}, {"gpu", g}}, util);
      m->Add({{"__name__", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}, {"gpu", g}}, energy);
    }
    return m;
  }();
  return *q;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  gpuwatch::query::EngineOptions opts;
  opts.max_samples = 100'000;
  auto e = gpuwatch::query::ParseExpr(in, opts.parse);
  if (!e.ok()) return 0;
  (void)gpuwatch::query::ExprToString(**e);
  const int64_t t = 1'700'000'000'000 + 20 * 60'000;
  (void)gpuwatch::query::InstantQuery(Store(), opts, **e, t);
  (void)gpuwatch::query::RangeQuery(Store(), opts, **e, t - 600'000, t, 60'000);
  return 0;
}
