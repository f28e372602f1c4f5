// libFuzzer target for the job protocol parser: every byte of a datagram comes from any local
// user's process (docs/job-protocol.md), so no input may crash, hang or allocate without bound.
// Built and run by scripts/fuzz.sh; CTest drives it over tests/fixtures/job_protocol.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "jobs/job_protocol.h"
#include "jobs/job_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::jobs;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  constexpr double kNow = 1764460800.0;
  DatagramResult d = ParseJobDatagram(in, kNow);
  DatagramResult s = ParseJobDatagram(in, kNow, /*stream=*/true);
  // Whatever parsed must also be safe to apply, verified sender or not.
  static JobRegistry* registry = new JobRegistry(JobRegistryOptions{}, [](uint32_t) {
    return std::optional<ProcInfo>(ProcInfo{1000, 1, 'S', {}});
  });
  for (const auto& m : d.messages) (void)registry->Accept(m, Sender{4242, 1000}, 1764460800000);
  for (const auto& m : s.messages) (void)registry->Accept(m, Sender{}, 1764460800000);
  registry->CloseWindow(1764460815000);
  (void)registry->TakeOutputs();
  return 0;
}
