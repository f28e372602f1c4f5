// Test-only: an NvmlSource on the project's mock NVML (src/mock_nvml), loaded through the
// production dlopen path with the scenario given (a shape such as "8xH100" or a scenario JSON path;
// docs/format/mock-nvml-scenario.md). Header-only; include from *_test.cc files only.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <string>

#include "collect/nvml_source.h"

namespace gpuwatch::collect::testing {

inline const std::string kMockNvmlLibrary =
    std::string(GPUWATCH_BINARY_DIR) + "/libgpuwatch-mock-nvml.so";

// The mock reads GPUWATCH_MOCK_NVML at nvmlInit, so one source per scenario at a time.
inline std::unique_ptr<NvmlSource> OpenMockNvml(const std::string& scenario) {
  setenv("GPUWATCH_MOCK_NVML", scenario.c_str(), 1);
  NvmlSourceOptions o;
  o.library_path = kMockNvmlLibrary;
  auto src = std::make_unique<NvmlSource>(o);
  Status st = src->Init();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return src;
}

}  // namespace gpuwatch::collect::testing
