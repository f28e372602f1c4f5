#include "collect/nvml_library.h"

#include <dlfcn.h>

#include <cstring>
#include <initializer_list>

namespace gpuwatch::collect {
namespace {

// Older names to try when the versioned symbol is absent (pre-R450 drivers and the like).
// Only aliases with an identical signature belong here; where the old symbol writes less of a
// struct (nvmlEventSetWait has no instance ids), the caller pre-fills the missing fields.
const char* const* Fallbacks(const char* name) {
  static const char* const kInit[] = {"nvmlInit", nullptr};
  static const char* const kCount[] = {"nvmlDeviceGetCount", nullptr};
  static const char* const kHandle[] = {"nvmlDeviceGetHandleByIndex", nullptr};
  static const char* const kPci[] = {"nvmlDeviceGetPciInfo_v2", nullptr};
  static const char* const kWait[] = {"nvmlEventSetWait", nullptr};
  static const char* const kCuda[] = {"nvmlSystemGetCudaDriverVersion", nullptr};
  static const char* const kNone[] = {nullptr};
  struct Alias {
    const char* name;
    const char* const* fallbacks;
  };
  static const Alias kAliases[] = {
      {"nvmlInit_v2", kInit},
      {"nvmlDeviceGetCount_v2", kCount},
      {"nvmlDeviceGetHandleByIndex_v2", kHandle},
      {"nvmlDeviceGetPciInfo_v3", kPci},
      {"nvmlEventSetWait_v2", kWait},
      {"nvmlSystemGetCudaDriverVersion_v2", kCuda},
  };
  for (const auto& a : kAliases)
    if (std::strcmp(a.name, name) == 0) return a.fallbacks;
  return kNone;
}

void* Resolve(void* handle, const char* name) {
  if (void* p = dlsym(handle, name)) return p;
  for (const char* const* f = Fallbacks(name); *f; ++f)
    if (void* p = dlsym(handle, *f)) return p;
  return nullptr;
}

}  // namespace

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Load(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    return Status::Unavailable("cannot load NVML library '" + path +
                               "': " + (err ? err : "unknown dlopen error"));
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary());
  lib->handle_ = handle;
  lib->path_ = path;
#define GPUWATCH_NVML_RESOLVE(name, args)                                                  \
  lib->table_.name = reinterpret_cast<decltype(lib->table_.name)>(Resolve(handle, #name)); \
  if (lib->table_.name) ++lib->resolved_;
  GPUWATCH_NVML_FUNCTIONS(GPUWATCH_NVML_RESOLVE)
#undef GPUWATCH_NVML_RESOLVE
  lib->table_.nvmlErrorString =
      reinterpret_cast<const char* (*)(nvmlReturn_t)>(dlsym(handle, "nvmlErrorString"));
  if (!lib->table_.nvmlInit_v2 || !lib->table_.nvmlDeviceGetCount_v2 ||
      !lib->table_.nvmlDeviceGetHandleByIndex_v2) {
    return Status::Unavailable("'" + path + "' is not an NVML library (no nvmlInit symbol)");
  }
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  // dlclose is deliberately skipped: NVML starts threads of its own that may still run
  // briefly after nvmlShutdown, and unmapping their code under them crashes the process.
}

const char* NvmlErrorName(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_SUCCESS:
      return "NVML_SUCCESS";
    case NVML_ERROR_UNINITIALIZED:
      return "NVML_ERROR_UNINITIALIZED";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "NVML_ERROR_INVALID_ARGUMENT";
    case NVML_ERROR_NOT_SUPPORTED:
      return "NVML_ERROR_NOT_SUPPORTED";
    case NVML_ERROR_NO_PERMISSION:
      return "NVML_ERROR_NO_PERMISSION";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "NVML_ERROR_ALREADY_INITIALIZED";
    case NVML_ERROR_NOT_FOUND:
      return "NVML_ERROR_NOT_FOUND";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "NVML_ERROR_INSUFFICIENT_SIZE";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "NVML_ERROR_INSUFFICIENT_POWER";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "NVML_ERROR_DRIVER_NOT_LOADED";
    case NVML_ERROR_TIMEOUT:
      return "NVML_ERROR_TIMEOUT";
    case NVML_ERROR_IRQ_ISSUE:
      return "NVML_ERROR_IRQ_ISSUE";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML_ERROR_LIBRARY_NOT_FOUND";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "NVML_ERROR_FUNCTION_NOT_FOUND";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "NVML_ERROR_CORRUPTED_INFOROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "NVML_ERROR_GPU_IS_LOST";
    case NVML_ERROR_RESET_REQUIRED:
      return "NVML_ERROR_RESET_REQUIRED";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "NVML_ERROR_OPERATING_SYSTEM";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
    case NVML_ERROR_IN_USE:
      return "NVML_ERROR_IN_USE";
    case NVML_ERROR_MEMORY:
      return "NVML_ERROR_MEMORY";
    case NVML_ERROR_NO_DATA:
      return "NVML_ERROR_NO_DATA";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
      return "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "NVML_ERROR_INSUFFICIENT_RESOURCES";
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
      return "NVML_ERROR_FREQ_NOT_SUPPORTED";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "NVML_ERROR_ARGUMENT_VERSION_MISMATCH";
    case NVML_ERROR_DEPRECATED:
      return "NVML_ERROR_DEPRECATED";
    case NVML_ERROR_NOT_READY:
      return "NVML_ERROR_NOT_READY";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "NVML_ERROR_GPU_NOT_FOUND";
    case NVML_ERROR_INVALID_STATE:
      return "NVML_ERROR_INVALID_STATE";
    case NVML_ERROR_UNKNOWN:
      return "NVML_ERROR_UNKNOWN";
    default:
      return "NVML_ERROR_UNRECOGNIZED";
  }
}

}  // namespace gpuwatch::collect
