// libFuzzer target for the attribution parsers: every one of them reads text that a monitored
// (possibly hostile) process controls — its environment, its cgroup placement, its comm in
// /proc/<pid>/stat — so none may crash, hang or read out of bounds on any bytes.
//
// Build (not wired into CMake yet): clang++ -std=c++20 -fsanitize=fuzzer,address,undefined
//   -Isrc src/collect/attribution_fuzz.cc src/collect/attribution.cc src/common/*.cc -lfmt
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "collect/attribution.h"
#include "model/gpu.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::collect;
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  ContainerRef c = ParseCgroup(in);
  std::vector<VisibleDeviceRef> cuda = ParseCudaVisibleDevices(in);
  auto env = ParseEnviron(in);
  StatusIds ids = ParseStatusIds(in);
  auto start = ParseStatStartTime(in);
  auto users = ParsePasswd(in);
  auto container = ParseNvidiaVisibleDevices(in);

  // Drive the resolver with whatever the input parsed to, over a small fixed topology with a
  // MIG-enabled GPU, so index, prefix and MIG matching all see hostile lists.
  std::vector<gpuwatch::model::GpuStaticInfo> gpus(3);
  for (unsigned i = 0; i < gpus.size(); ++i) {
    gpus[i].index = i;
    gpus[i].uuid = "GPU-0000000" + std::to_string(i) + "-1111-2222-3333-444444444444";
  }
  gpus[1].mig_enabled = true;
  gpus[1].mig_instances = {{1, 0, "MIG-aaaaaaaa-1111-2222-3333-444444444444"},
                           {2, 0, "MIG-bbbbbbbb-1111-2222-3333-444444444444"}};
  DeviceTarget target{gpus[1].uuid, 2u, 0u};
  (void)ResolveVisibleIndex(&cuda, container.ok() ? &container.value() : nullptr, target, gpus);
  (void)ResolveVisibleIndex(nullptr, nullptr, target, gpus);

  (void)c;
  (void)env;
  (void)ids;
  (void)start;
  (void)users;
  return 0;
}
