#include "analyze/drive.h"

#include <algorithm>

namespace gpuwatch::analyze {

Result<DriveResult> Drive(trace::TraceReader& reader, Diagnoser& diagnoser, ReadErrorPolicy policy,
                          const std::function<void(const trace::TraceRecord&)>& before_each) {
  reader.SetSkipMalformed(policy == ReadErrorPolicy::kSkipRecord);
  DriveResult out;
  trace::TraceRecord rec;
  while (true) {
    Result<bool> more = reader.Next(&rec);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (!out.any) {
      out.first_t = rec.t;
      out.any = true;
    }
    if (before_each) before_each(rec);
    out.last_t = std::max(out.last_t, rec.t);
    diagnoser.Observe(rec);
    ++out.records;
  }
  out.skipped = reader.Stats().malformed_records;
  out.first_skipped_error = reader.Stats().first_malformed;
  return out;
}

}  // namespace gpuwatch::analyze
