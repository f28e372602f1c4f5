// Weak fallbacks for every entry of GPUWATCH_NVML_FUNCTIONS.
//
// A function newly added to the table is exported at once, answering NVML_ERROR_NOT_SUPPORTED
// (what an older driver's NVML answers for a feature it lacks), so the mock keeps linking while
// its real implementation is written. The strong definitions in mock_nvml.cc win at link time;
// mock_nvml_test checks that none of the implemented functions fell back to a stub.
#include "collect/nvml_api.h"

#define GPUWATCH_MOCK_STUB(name, args)                                             \
  extern "C" __attribute__((weak, visibility("default"))) nvmlReturn_t name args { \
    return NVML_ERROR_NOT_SUPPORTED;                                               \
  }
GPUWATCH_NVML_FUNCTIONS(GPUWATCH_MOCK_STUB)
#undef GPUWATCH_MOCK_STUB
