#include "trace/trace_records.h"

#include <array>

namespace gpuwatch::trace {
namespace {

// Indexed by RecordType.
constexpr std::array<std::string_view, kRecordTypeCount> kTypeNames = {
    "unknown", "node", "gpu", "host", "proc", "job", "step", "event", "log"};

static_assert(std::variant_size_v<decltype(TraceRecord::body)> == kRecordTypeCount,
              "TraceRecord::body's alternatives follow RecordType");
static_assert(std::is_same_v<std::variant_alternative_t<static_cast<size_t>(RecordType::kLog),
                                                        decltype(TraceRecord::body)>,
                             TraceLog>);
static_assert(std::is_same_v<std::variant_alternative_t<static_cast<size_t>(RecordType::kNode),
                                                        decltype(TraceRecord::body)>,
                             TraceNode>);

}  // namespace

std::string_view RecordTypeName(RecordType type) {
  const auto i = static_cast<size_t>(type);
  return i < kTypeNames.size() ? kTypeNames[i] : kTypeNames[0];
}

RecordType RecordTypeFromName(std::string_view name) {
  // "unknown" is not a record type of the spec: a record that says so is an unknown type.
  for (size_t i = 1; i < kTypeNames.size(); ++i)
    if (kTypeNames[i] == name) return static_cast<RecordType>(i);
  return RecordType::kUnknown;
}

}  // namespace gpuwatch::trace
