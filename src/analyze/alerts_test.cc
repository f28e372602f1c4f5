// The alert lifecycle: fire, update, resolve, silence, maintenance, inhibit, de-duplicate.
#include "analyze/alerts.h"

#include <gtest/gtest.h>

#include <regex>

namespace gpuwatch::analyze {
namespace {

constexpr int64_t kT0 = 1'764'460'800'000;  // ms

Finding F(const std::string& cause, const std::string& severity, std::optional<int> gpu,
          int64_t first_ms, int64_t last_ms, const std::string& node = "n1") {
  Finding f;
  auto ref = ParseCauseText(cause);
  EXPECT_TRUE(ref.has_value()) << cause;
  f.cause = ref ? ref->cause : Cause::kUserRule;
  f.rule = ref ? ref->rule : "";
  f.severity = model::SeverityFromName(severity).value_or(Severity::kWarning);
  f.node = node;
  f.gpu = gpu;
  f.first_seen = first_ms / 1000.0;
  f.last_seen = last_ms / 1000.0;
  f.summary = cause + " summary";
  return f;
}

using Kind = AlertNotification::Kind;

std::vector<std::pair<Kind, std::string>> Kinds(const std::vector<AlertNotification>& ns) {
  std::vector<std::pair<Kind, std::string>> out;
  for (const auto& n : ns) out.emplace_back(n.kind, n.alert.finding.CauseText());
  return out;
}

TEST(AlertBookTest, InfoIsRecordedApartAndNeverNotified) {
  AlertBook book;
  // A temperature trend (info), then the throttle it announced (warning), same GPU.
  auto n = book.Update({F("thermal_throttle", "info", 3, kT0, kT0)}, kT0 + 5000);
  EXPECT_TRUE(n.empty());
  ASSERT_EQ(book.Alerts().size(), 1u);
  EXPECT_EQ(book.Alerts()[0].fingerprint, "thermal_throttle/n1/3////info");
  EXPECT_EQ(book.Alerts()[0].state, "firing");
  EXPECT_EQ(book.Alerts()[0].suppressed_by, "info (recorded, not notified)");
  n = book.Update({F("thermal_throttle", "info", 3, kT0, kT0 + 60000),
                   F("thermal_throttle", "warning", 3, kT0 + 60000, kT0 + 60000)},
                  kT0 + 65000);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].kind, Kind::kFiring);
  EXPECT_EQ(n[0].alert.fingerprint, "thermal_throttle/n1/3///");
  EXPECT_EQ(n[0].alert.starts_ms, kT0 + 60000);  // the warning's own first_seen
  EXPECT_EQ(book.Alerts().size(), 2u);
  ASSERT_EQ(book.Notifiable().size(), 1u);
  EXPECT_EQ(book.Notifiable()[0].finding.severity, Severity::kWarning);
}

TEST(AlertBookTest, AConditionFiresOnceUpdatesQuietlyAndResolvesAfterItsHysteresis) {
  AlertBook book;
  auto n = book.Update({F("thermal_throttle", "warning", 3, kT0, kT0)}, kT0 + 5000);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].kind, Kind::kFiring);
  EXPECT_EQ(n[0].alert.starts_ms, kT0);
  // Seen again and again: one alert, no new notification.
  for (int i = 1; i <= 10; ++i) {
    auto more = book.Update({F("thermal_throttle", "warning", 3, kT0, kT0 + i * 5000)},
                            kT0 + 5000 + i * 5000);
    EXPECT_TRUE(more.empty()) << i;
  }
  ASSERT_EQ(book.Alerts().size(), 1u);
  EXPECT_EQ(book.Alerts()[0].seen, 11u);
  EXPECT_EQ(book.Alerts()[0].updated_ms, kT0 + 50000);
  // Not seen for 120 s (the engine keeps the old finding): resolved, once.
  const auto stale = F("thermal_throttle", "warning", 3, kT0, kT0 + 50000);
  EXPECT_TRUE(book.Update({stale}, kT0 + 50000 + 120000).empty());
  n = book.Update({stale}, kT0 + 50000 + 120001);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].kind, Kind::kResolved);
  EXPECT_EQ(n[0].alert.ends_ms, kT0 + 170001);
  EXPECT_TRUE(book.Update({stale}, kT0 + 400000).empty());  // the old finding does not re-fire
  EXPECT_EQ(book.Alerts()[0].state, "resolved");
  EXPECT_TRUE(book.Notifiable().empty());
  // It comes back: a new firing alert, starting at its return.
  n = book.Update({F("thermal_throttle", "warning", 3, kT0, kT0 + 500000)}, kT0 + 501000);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].kind, Kind::kFiring);
  EXPECT_EQ(n[0].alert.starts_ms, kT0 + 500000);
}

TEST(AlertBookTest, HardwareEventsFireAtOnceAndAreHeldForAnHour) {
  AlertBook book;
  auto n = book.Update({F("ecc_dbe", "critical", 1, kT0, kT0)}, kT0 + 1000);
  ASSERT_EQ(Kinds(n), (std::vector<std::pair<Kind, std::string>>{{Kind::kFiring, "ecc_dbe"}}));
  EXPECT_TRUE(book.Update({F("ecc_dbe", "critical", 1, kT0, kT0)}, kT0 + 3'600'000).empty());
  n = book.Update({F("ecc_dbe", "critical", 1, kT0, kT0)}, kT0 + 3'600'001);
  ASSERT_EQ(Kinds(n), (std::vector<std::pair<Kind, std::string>>{{Kind::kResolved, "ecc_dbe"}}));
  EXPECT_TRUE(IsEventCause(Cause::kGpuLost));
  EXPECT_FALSE(IsEventCause(Cause::kDataStall));
}

TEST(AlertBookTest, ARisingSeverityIsAnUpdate) {
  AlertBook book;
  book.Update({F("job_hang", "warning", std::nullopt, kT0, kT0)}, kT0);
  auto n = book.Update({F("job_hang", "critical", std::nullopt, kT0, kT0 + 5000)}, kT0 + 5000);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].kind, Kind::kUpdated);
  EXPECT_EQ(n[0].alert.finding.severity, Severity::kCritical);
  // Falling back is not news.
  EXPECT_TRUE(
      book.Update({F("job_hang", "warning", std::nullopt, kT0, kT0 + 10000)}, kT0 + 10000).empty());
}

TEST(AlertBookTest, ASilencedAlertIsTrackedNotNotifiedAndFiresWhenTheSilenceEnds) {
  AlertBook book;
  Silence s;
  s.node = "n1";
  s.gpu = 2;
  s.ends_ms = kT0 + 60000;
  s.comment = "reseating GPU 2";
  auto id = book.AddSilence(s, kT0);
  ASSERT_TRUE(id.ok()) << id.status().message();
  auto n = book.Update({F("pcie_downgrade", "warning", 2, kT0, kT0 + 1000),
                        F("pcie_downgrade", "warning", 3, kT0, kT0 + 1000)},
                       kT0 + 1000);
  ASSERT_EQ(n.size(), 1u);  // GPU 3 only
  EXPECT_EQ(n[0].alert.finding.gpu, 3);
  auto alerts = book.Alerts();
  ASSERT_EQ(alerts.size(), 2u);
  for (const auto& a : alerts) {
    EXPECT_EQ(a.state, "firing");
    EXPECT_EQ(a.suppressed_by, a.finding.gpu == 2 ? "silence " + *id : "");
  }
  EXPECT_EQ(book.Silences(kT0 + 1000).size(), 1u);
  // Still firing when the silence ends: now it is told.
  n = book.Update({F("pcie_downgrade", "warning", 2, kT0, kT0 + 60000),
                   F("pcie_downgrade", "warning", 3, kT0, kT0 + 60000)},
                  kT0 + 60000);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].kind, Kind::kFiring);
  EXPECT_EQ(n[0].alert.finding.gpu, 2);
  EXPECT_TRUE(book.Silences(kT0 + 60000).empty());
}

TEST(AlertBookTest, AMaintenanceWindowHoldsBackTheWholeNodeAndCanBeEndedEarly) {
  AlertBook book;
  Silence m;
  m.node = "n1";
  m.maintenance = true;
  m.ends_ms = kT0 + 3'600'000;
  auto id = book.AddSilence(m, kT0);
  ASSERT_TRUE(id.ok());
  auto n = book.Update(
      {F("xid", "warning", 0, kT0, kT0), F("data_stall", "warning", std::nullopt, kT0, kT0),
       F("xid", "warning", 0, kT0, kT0, "n2")},
      kT0 + 1000);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].alert.finding.node, "n2");
  for (const auto& a : book.Alerts()) {
    if (a.finding.node == "n1") {
      EXPECT_EQ(a.suppressed_by, "maintenance " + *id);
    }
  }
  ASSERT_TRUE(book.ExpireSilence(*id, kT0 + 2000).ok());
  EXPECT_EQ(book.ExpireSilence(*id, kT0 + 2000).code(), StatusCode::kNotFound);
  n = book.Update(
      {F("xid", "warning", 0, kT0, kT0), F("data_stall", "warning", std::nullopt, kT0, kT0 + 2000)},
      kT0 + 2000);
  EXPECT_EQ(n.size(), 2u);
}

TEST(AlertBookTest, ALostGpuInhibitsItsOtherCardAlertsAndADeadRankItsJobsHang) {
  AlertBook book;
  // The dead rank on another node than the lost GPU: on the same node the lost GPU explains the
  // rank's death as well (findings.md: "a rank that dies because its GPU fell off the bus is
  // gpu_lost"), which the engine and the alert book judge by one graph.
  Finding hang = F("job_hang", "critical", std::nullopt, kT0, kT0, "n2");
  hang.job = "j1";
  Finding exit = F("rank_exit", "critical", std::nullopt, kT0, kT0, "n2");
  exit.job = "j1";
  exit.rank = 3;
  auto n = book.Update(
      {F("gpu_lost", "critical", 2, kT0, kT0), F("thermal_throttle", "warning", 2, kT0, kT0),
       F("thermal_throttle", "warning", 5, kT0, kT0), hang, exit},
      kT0 + 1000);
  std::vector<std::string> told;
  for (const auto& x : n) told.push_back(AlertFingerprint(x.alert.finding));
  EXPECT_EQ(told, (std::vector<std::string>{"gpu_lost/n1/2///", "rank_exit/n2//j1/3/",
                                            "thermal_throttle/n1/5///"}));
  for (const auto& a : book.Alerts()) {
    if (a.finding.cause == Cause::kThermalThrottle && a.finding.gpu == 2) {
      EXPECT_EQ(a.suppressed_by, "inhibited by gpu_lost/n1/2///");
    }
    if (a.finding.cause == Cause::kJobHang) {
      EXPECT_EQ(a.suppressed_by, "inhibited by rank_exit/n2//j1/3/");
    }
  }
  EXPECT_EQ(book.Notifiable().size(), 3u);
}

TEST(AlertBookTest, AUserRuleClearsAfterItsOwnHoldAndCanBeSilenced) {
  AlertBook book(AlertOptions{.hold_ms_by_cause = {{"user:GpuHot", 20000}}});
  Finding f = F("thermal_throttle", "warning", 1, kT0, kT0);
  f.cause = Cause::kUserRule;
  f.rule = "GpuHot";
  ASSERT_EQ(book.Update({f}, kT0).size(), 1u);
  EXPECT_TRUE(book.Update({f}, kT0 + 20000).empty());
  auto n = book.Update({f}, kT0 + 20001);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].kind, Kind::kResolved);
  Silence s;
  s.cause = "user:GpuHot";
  s.ends_ms = kT0 + 60000;
  EXPECT_TRUE(book.AddSilence(s, kT0).ok());
}

TEST(AlertBookTest, StateRestoresAlertsAndSilencesWithoutNotifyingTwice) {
  AlertBook book;
  Finding lost = F("gpu_lost", "critical", 2, kT0, kT0);
  lost.evidence = {"xid 79: fell off the bus"};
  lost.job = "j1";
  ASSERT_EQ(book.Update({lost}, kT0 + 1000).size(), 1u);
  Silence s;
  s.cause = "xid";
  s.comment = "known";
  s.ends_ms = kT0 + 3'600'000;
  auto sid = book.AddSilence(s, kT0 + 2000);
  ASSERT_TRUE(sid.ok());
  Silence gone = s;
  gone.ends_ms = kT0 + 10'000;
  ASSERT_TRUE(book.AddSilence(gone, kT0 + 2000).ok());
  // Through text, as the agent keeps it.
  const nlohmann::json state = nlohmann::json::parse(book.State(kT0 + 5000).dump());
  AlertBook restored;
  ASSERT_TRUE(restored.Restore(state, kT0 + 60'000).ok());
  ASSERT_EQ(restored.Alerts().size(), 1u);
  const Alert a = restored.Alerts()[0];
  EXPECT_EQ(a.fingerprint, "gpu_lost/n1/2/j1//");
  EXPECT_TRUE(a.notified);
  EXPECT_EQ(a.starts_ms, kT0);
  EXPECT_EQ(a.finding.evidence, lost.evidence);
  // The silence that ended while the agent was down is gone; the other is back.
  ASSERT_EQ(restored.Silences(kT0 + 60'000).size(), 1u);
  EXPECT_EQ(restored.Silences(kT0 + 60'000)[0].id, *sid);
  EXPECT_EQ(restored.Silences(kT0 + 60'000)[0].comment, "known");
  // The new process finds the lost GPU again: the same alert, not a second notification.
  lost.first_seen = lost.last_seen = (kT0 + 61'000) / 1000.0;
  EXPECT_TRUE(restored.Update({lost}, kT0 + 62'000).empty());
  EXPECT_EQ(restored.Alerts()[0].starts_ms, kT0);
  // New silence ids continue after the restored ones.
  auto next = restored.AddSilence(s, kT0 + 62'000);
  ASSERT_TRUE(next.ok());
  EXPECT_NE(*next, *sid);
  // Damaged states are refused, naming what is wrong, and leave the book as it was.
  nlohmann::json bad = state;
  bad["alerts"][0]["finding"]["severity"] = "loud";
  Status st = restored.Restore(bad, kT0);
  EXPECT_NE(st.message().find("alert 0: finding field 'severity'"), std::string::npos)
      << st.message();
  bad = state;
  bad["silences"][0].erase("ends_ms");
  st = restored.Restore(bad, kT0);
  EXPECT_NE(st.message().find("silence 0: 'ends_ms'"), std::string::npos) << st.message();
  EXPECT_FALSE(restored.Restore(nlohmann::json::array(), kT0).ok());
  EXPECT_EQ(restored.Alerts().size(), 1u);
  EXPECT_EQ(restored.Silences(kT0 + 62'000).size(), 2u);
}

TEST(AlertBookTest, BadSilencesAndStaleFindingsAreRefused) {
  AlertBook book;
  Silence s;
  s.ends_ms = kT0 + 1000;
  EXPECT_EQ(book.AddSilence(s, kT0).status().code(), StatusCode::kInvalidArgument);  // no matcher
  s.cause = "bogus";
  EXPECT_NE(book.AddSilence(s, kT0).status().message().find("unknown cause 'bogus'"),
            std::string::npos);
  s.cause = "xid";
  s.ends_ms = kT0 - 1;
  EXPECT_FALSE(book.AddSilence(s, kT0).ok());  // ends in the past
  // A finding over before the book heard of it is no alert.
  EXPECT_TRUE(
      book.Update({F("data_stall", "warning", std::nullopt, kT0, kT0)}, kT0 + 600000).empty());
  EXPECT_TRUE(book.Alerts().empty());
}

}  // namespace
}  // namespace gpuwatch::analyze

namespace gpuwatch::analyze {
namespace {
// D2 (issue 17): an id is what DELETE takes, so it is random, not the next of a sequence.
TEST(SilenceIds, AreRandomAndKeepTheirKindPrefix) {
  AlertBook book;
  Silence s;
  s.node = "n1";
  s.ends_ms = 2'000'000'000'000;
  auto a = book.AddSilence(s, 1'700'000'000'000);
  auto b = book.AddSilence(s, 1'700'000'000'000);
  s.maintenance = true;
  auto m = book.AddSilence(s, 1'700'000'000'000);
  ASSERT_TRUE(a.ok() && b.ok() && m.ok());
  EXPECT_NE(*a, *b);
  EXPECT_TRUE(std::regex_match(*a, std::regex("s[0-9a-f]{16}"))) << *a;
  EXPECT_TRUE(std::regex_match(*m, std::regex("m[0-9a-f]{16}"))) << *m;
}
}  // namespace
}  // namespace gpuwatch::analyze
