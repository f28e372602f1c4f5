#include "cli/command.h"

#include <cstdio>

#include "collect/nvml_source.h"
#include "common/log.h"

namespace gpuwatch::cli {

int Fail(const Status& st) {
  std::fprintf(stderr, "gpuwatch: %s\n", st.message().c_str());
  return 2;
}

Status SetLevel(const std::string& level) {
  if (level == "debug")
    SetLogLevel(LogLevel::kDebug);
  else if (level == "info")
    SetLogLevel(LogLevel::kInfo);
  else if (level == "warning" || level == "warn")
    SetLogLevel(LogLevel::kWarning);
  else if (level == "error")
    SetLogLevel(LogLevel::kError);
  else
    return Status::InvalidArgument("bad --log-level '" + level +
                                   "': debug, info, warning or error");
  return Status::Ok();
}

std::unique_ptr<collect::GpuSource> MakeGpuSource(const std::string& nvml_lib) {
  collect::NvmlSourceOptions o;
  o.library_path = nvml_lib;
  return std::make_unique<collect::NvmlSource>(o);
}

}  // namespace gpuwatch::cli
