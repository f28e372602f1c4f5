// Test helper: a fresh, empty directory per test under gtest's TempDir, named after the test
// and the process so parallel CTest runs of the same binary never share one. The fixture
// removes it in TearDown. Test-only; not part of gw_store.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace gpuwatch::store::testing {

inline std::string FreshScratchDir(std::string_view prefix) {
  std::string dir = ::testing::TempDir() + "/" + std::string(prefix) + "_" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                    std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace gpuwatch::store::testing
