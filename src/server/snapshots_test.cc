// The snapshot cap (issue 17, D9): fake failures from one uid (one snapshot per 10 s) once
// pushed real job_failed snapshots out of the cap of 50. Past the cap, the owner with the most
// loses its oldest, so another user's snapshot stays.
#include "server/snapshots.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace gpuwatch::server {
namespace {

TEST(SnapshotManager, D9_OneOwnersFailuresNeverEvictAnothers) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("gw_snapshots_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  trace::FlightRecorder recorder;
  SnapshotOptions o;
  o.dir = dir;
  o.max_snapshots = 3;
  o.min_gap_ms = 0;
  o.same_key_gap_ms = 0;
  SnapshotManager m(o, &recorder, nullptr, "n1");
  ASSERT_TRUE(m.Open().ok());
  const int64_t t0 = 1'764'460'800'000;
  ASSERT_TRUE(m.Take("job_failed", "real", t0, false, "uid:1000").ok());
  ASSERT_TRUE(m.Take("gpu_lost", "", t0 + 1000, false, "").ok());
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(
        m.Take("job_failed", "fake" + std::to_string(i), t0 + 10'000 * (i + 1), false, "uid:65534")
            .ok());
  m.Stop();
  std::vector<std::string> jobs;
  for (const auto& s : m.List()) jobs.push_back(s.job.empty() ? s.reason : s.job);
  // Newest first: the flooder keeps only its newest; the real failure and the node's stay.
  EXPECT_EQ(jobs, (std::vector<std::string>{"fake5", "gpu_lost", "real"}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpuwatch::server
