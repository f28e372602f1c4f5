// Test-only helpers for reading inputs: whole files, the project's checked-in fixtures, and the
// real captures in ../shared (beside the project; absent when it is cloned alone, and tests that
// need it skip with a message saying so). Header-only; include from *_test.cc files only.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gpuwatch::testing {

// The whole file; "" when it cannot be read (the test's expectations then fail visibly).
inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// <project>/tests/fixtures/<sub>
inline std::string FixtureDir(const std::string& sub) {
  return std::string(GPUWATCH_SOURCE_DIR) + "/tests/fixtures/" + sub;
}

// <project>/../shared/<sub>, e.g. "real/nccl" or "scenarios".
inline std::string SharedDir(const std::string& sub) {
  return std::string(GPUWATCH_SOURCE_DIR) + "/../shared/" + sub;
}

}  // namespace gpuwatch::testing

// Skips the current test when `dir` (a SharedDir) is absent.
#define GW_SKIP_WITHOUT_SHARED(dir)                                                       \
  do {                                                                                    \
    if (!std::filesystem::is_directory(dir))                                              \
      GTEST_SKIP() << (dir) << " is absent: tests on real captures need ../shared beside" \
                   << " the project";                                                     \
  } while (0)
