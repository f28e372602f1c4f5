// NvmlLibrary: NVML loaded with dlopen into a table of function pointers.
//
// No NVIDIA header or library is needed at build time. Newer symbol versions are tried first
// (nvmlInit_v2 before nvmlInit, …); a symbol the installed driver lacks leaves a null entry and
// the caller treats that field as unsupported. A missing library is an Unavailable status,
// never a crash. Immutable after Load(); the table may be used from any thread (NVML itself
// is thread-safe).
#pragma once

#include <memory>
#include <string>

#include "collect/nvml_api.h"
#include "common/status.h"

namespace gpuwatch::collect {

inline constexpr const char* kDefaultNvmlLibrary = "libnvidia-ml.so.1";

class NvmlLibrary {
 public:
  struct Table {
#define GPUWATCH_NVML_DECLARE_POINTER(name, args) nvmlReturn_t(*name) args = nullptr;
    GPUWATCH_NVML_FUNCTIONS(GPUWATCH_NVML_DECLARE_POINTER)
#undef GPUWATCH_NVML_DECLARE_POINTER
    const char* (*nvmlErrorString)(nvmlReturn_t) = nullptr;
  };

  // Loads `path` (a file name searched by the dynamic loader, or a path).
  static Result<std::unique_ptr<NvmlLibrary>> Load(const std::string& path);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const Table& fn() const { return table_; }
  const std::string& path() const { return path_; }
  // Number of table entries that resolved (for the start-up log line).
  int resolved() const { return resolved_; }

 private:
  NvmlLibrary() = default;
  void* handle_ = nullptr;
  std::string path_;
  Table table_;
  int resolved_ = 0;
};

// "NVML_ERROR_GPU_IS_LOST" — stable names for logs and capability reasons (never the
// driver's localized string, which differs by version).
const char* NvmlErrorName(nvmlReturn_t rc);

}  // namespace gpuwatch::collect
