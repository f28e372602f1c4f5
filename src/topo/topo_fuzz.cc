// libFuzzer target for the `nvidia-smi topo -m` parser. Its input is text a user pastes or a
// script captures from any machine, so no bytes may crash it, hang it or read out of bounds.
// Beyond not crashing it checks the parser's own promises: what it parses renders to text that
// parses back to the same matrix, and the import JSON always dumps.
//
// Build: scripts/fuzz.sh (clang, libFuzzer); CTest runs it through tests/fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "topo/topo_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::topo;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto t = ParseTopoMatrix(in);
  if (!t.ok()) {
    if (t.status().message().size() > 512) std::abort();  // messages quote, never copy, input
    return 0;
  }
  (void)TopoImportJson(*t).dump();
  auto again = ParseTopoMatrix(RenderTopoMatrix(*t));
  if (!again.ok()) std::abort();
  if (again->gpu_names != t->gpu_names || again->nic_names != t->nic_names ||
      again->gpu_links != t->gpu_links || again->gpu_nic_links != t->gpu_nic_links ||
      again->nic_links != t->nic_links || again->cpu_affinity != t->cpu_affinity ||
      again->numa_affinity != t->numa_affinity ||
      again->numa_affinity_text != t->numa_affinity_text || again->gpu_numa_id != t->gpu_numa_id)
    std::abort();
  return 0;
}
