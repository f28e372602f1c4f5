// Test-only helpers for reading inputs: whole files, the project's checked-in fixtures, and the
// real captures in ../shared (beside the project; absent when it is cloned alone, and tests that
// need it skip with a message saying so). Header-only; include from *_test.cc files only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

// A captured input in a fixture folder and the "<stem>.expected.json" beside it (a path that
// may not exist: the caller says whether that is an error).
struct Capture {
  std::filesystem::path input;
  std::filesystem::path expected;
};

// The captures in `dir` whose extension is `ext` (".log"), or, with an empty `ext`, every file
// but the .json and .md ones; in name order, so that a failure reads the same on every machine.
inline std::vector<Capture> CapturesIn(const std::string& dir, const std::string& ext) {
  std::vector<Capture> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::filesystem::path& p = e.path();
    const std::string x = p.extension().string();
    if (!e.is_regular_file() || (ext.empty() ? x == ".json" || x == ".md" : x != ext)) continue;
    std::filesystem::path expected = p;
    expected.replace_extension(".expected.json");
    out.push_back({p, expected});
  }
  std::sort(out.begin(), out.end(),
            [](const Capture& a, const Capture& b) { return a.input < b.input; });
  return out;
}

}  // namespace gpuwatch::testing

// Skips the current test when `dir` (a SharedDir) is absent.
#define GW_SKIP_WITHOUT_SHARED(dir)                                                       \
  do {                                                                                    \
    if (!std::filesystem::is_directory(dir))                                              \
      GTEST_SKIP() << (dir) << " is absent: tests on real captures need ../shared beside" \
                   << " the project";                                                     \
  } while (0)
