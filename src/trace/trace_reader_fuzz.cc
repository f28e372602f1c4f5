// libFuzzer target for TraceReader. A trace is a file someone hands to `gpuwatch replay` (or
// a snapshot a crash cut short), so no bytes may crash the reader, hang it or read out of
// bounds. The input is read three ways: as plain text, and decompressed as .gz and .zst
// (mostly failing at the magic check or early in the stream, which is the point). Beyond not
// crashing it checks the reader's own promises: every error names the trace ("<name>:") and
// stays short, an error is sticky, and the stats add up.
//
// Build: scripts/fuzz.sh (clang, libFuzzer); CTest runs it through tests/fuzz_driver.cc.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "trace/trace_reader.h"

namespace {

void ReadAll(const std::string& data, const std::string& name) {
  using namespace gpuwatch::trace;
  auto r = TraceReader::OpenBuffer(data, name);
  if (!r.ok()) {
    if (r.status().message().rfind(name + ":", 0) != 0) std::abort();
    return;
  }
  TraceReader& reader = **r;
  TraceRecord rec;
  uint64_t delivered = 0;
  for (;;) {
    auto more = reader.Next(&rec);
    if (!more.ok()) {
      const std::string& m = more.status().message();
      if (m.rfind(name + ":", 0) != 0 || m.size() > 512) std::abort();  // quote, never copy
      auto again = reader.Next(&rec);
      if (again.ok() || again.status().message() != m) std::abort();  // sticky
      break;
    }
    if (!*more) break;
    ++delivered;
    if (rec.line == 0 || rec.line > reader.Stats().lines) std::abort();
    if (rec.type() != RecordType::kUnknown && !rec.unknown_type.empty()) std::abort();
  }
  const TraceReadStats& s = reader.Stats();
  uint64_t by_type = 0;
  for (uint64_t n : s.records_by_type) by_type += n;
  if (s.records != delivered || by_type != delivered) std::abort();
  if (s.out_of_order > s.records || s.out_of_order_within_node > s.out_of_order) std::abort();
  if (s.unknown_fields.size() > kMaxStatKeys || s.unknown_types.size() > kMaxStatKeys) std::abort();
  (void)s.Report();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  ReadAll(in, "fuzz.jsonl");
  ReadAll(in, "fuzz.jsonl.gz");
  ReadAll(in, "fuzz.jsonl.zst");
  return 0;
}
