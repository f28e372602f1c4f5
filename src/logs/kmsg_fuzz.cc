// libFuzzer target for the kernel-log and log-line parsers. Their input is text that others
// control: any process may write to /dev/kmsg (as root) and a job writes its own log files,
// so none may crash, hang or read out of bounds on any bytes.
//
// Build: scripts/fuzz.sh (clang, libFuzzer); CTest runs it through tests/fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "logs/kmsg.h"
#include "logs/log_classify.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpuwatch::logs;
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  auto record = ParseKmsgRecord(in);
  auto xid = ParseNvrmXid(in);
  if (record.ok()) {
    auto inner = ParseNvrmXid(record->message);
    (void)ClassifyLogLine(record->message);
    if (inner) (void)inner->pci_bus_id.size();
  }
  LogLineClass c = ClassifyLogLine(in);
  (void)LogLineKindName(c.kind);
  (void)LogSeverityName(c.severity);
  if (xid) (void)xid->text.size();
  return 0;
}
