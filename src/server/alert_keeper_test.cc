#include "server/alert_keeper.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/time_base.h"
#include "store/testing/scratch_dir.h"

namespace gpuwatch::server {
namespace {

namespace fs = std::filesystem;

// A firing alert and a silence survive a restart through <data-dir>/alerts.json; the counts
// name every severity.
TEST(AlertKeeperTest, AlertsAndSilencesSurviveARestart) {
  const std::string dir = store::testing::FreshScratchDir("alert_keeper");
  fs::create_directories(dir);
  // Now: Restore drops silences already over by the wall clock.
  const int64_t kT0Ms = WallClockMs();
  {
    AlertKeeper k({}, dir);
    ASSERT_TRUE(k.Init({}, "node-a").ok());
    EXPECT_FALSE(k.notifies());
    auto f = analyze::MakeFinding(model::Cause::kEccDbe, model::Severity::kCritical, "node-a", 3);
    f.first_seen = f.last_seen = static_cast<double>(kT0Ms) / 1000;
    const auto counts = k.Update({f}, kT0Ms);
    EXPECT_EQ(counts.size(), 6u);
    EXPECT_EQ(counts.at({"critical", "notified"}), 1);
    EXPECT_EQ(counts.at({"warning", "notified"}), 0);
    analyze::Silence s;
    s.node = "node-b";
    s.starts_ms = kT0Ms;
    s.ends_ms = kT0Ms + 3600'000;
    ASSERT_TRUE(k.AddSilence(s, kT0Ms).ok());
    EXPECT_EQ(k.Silences(kT0Ms).size(), 1u);
  }
  AlertKeeper again({}, dir);
  again.Restore();
  const nlohmann::json doc = again.Json(kT0Ms + 1000);
  ASSERT_EQ(doc["alerts"].size(), 1u) << doc.dump();
  EXPECT_EQ(doc["alerts"][0]["status"], "firing");
  ASSERT_EQ(doc["silences"].size(), 1u);
  EXPECT_EQ(again.Silences(kT0Ms + 1000)[0].node, "node-b");
  fs::remove_all(dir);
}

// A damaged file is kept aside, never overwritten, and the keeper starts empty.
TEST(AlertKeeperTest, ADamagedStateIsKeptAside) {
  const std::string dir = store::testing::FreshScratchDir("alert_keeper");
  fs::create_directories(dir);
  std::ofstream(dir + "/alerts.json") << "{not json";
  const int64_t kT0Ms = WallClockMs();
  AlertKeeper k({}, dir);
  k.Restore();
  EXPECT_TRUE(k.Json(kT0Ms)["alerts"].empty());
  EXPECT_FALSE(fs::exists(dir + "/alerts.json"));
  int aside = 0;
  for (const auto& e : fs::directory_iterator(dir))
    aside += e.path().filename().string().starts_with("alerts.json.damaged-");
  EXPECT_EQ(aside, 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpuwatch::server
