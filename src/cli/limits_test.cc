// docs/limits.md is a contract (issue 17): its table must be what the code does, and every
// limit must be settable and refuse nonsense by name.
#include "cli/limits.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gpuwatch::cli {
namespace {

TEST(Limits, DocsTableIsTheCodes) {
  std::ifstream in(std::string(GPUWATCH_SOURCE_DIR) + "/docs/limits.md");
  ASSERT_TRUE(in) << "docs/limits.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string table = RenderLimitsTable();
  EXPECT_NE(doc.find(table), std::string::npos)
      << "docs/limits.md's table differs from `gpuwatch docs limits`; regenerate it:\n"
      << table;
}

TEST(Limits, SetByNameWithUnits) {
  server::HttpOptions http;
  server::AgentOptions agent;
  jobs::JobListenerOptions listener;
  store::EventStoreOptions events;
  const LimitTargets t{&http, &agent, &listener, &events};
  ASSERT_TRUE(ApplyLimits({"http.max_headers=200,query.timeout=90s", "write.max_body_bytes=8MiB",
                           "jobs.max_jobs_per_uid=10", "jobs.tcp_idle_timeout=5m",
                           "events.bulk_retention_bytes=1GiB"},
                          t)
                  .ok());
  EXPECT_EQ(http.limits.head.max_headers, 200u);
  EXPECT_EQ(http.query_timeout, std::chrono::seconds(90));
  EXPECT_EQ(http.max_write_body_bytes, 8u << 20);
  EXPECT_EQ(agent.jobs.max_jobs_per_uid, 10u);
  EXPECT_EQ(listener.tcp_idle_timeout_ms, 300'000);
  EXPECT_EQ(events.bulk_retention_bytes, 1ull << 30);
  // A target left out is skipped, not an error: main applies the same flags to each in turn.
  EXPECT_TRUE(ApplyLimits({"jobs.max_jobs=5"}, LimitTargets{.http = &http}).ok());
}

TEST(Limits, NonsenseIsRefusedByName) {
  server::HttpOptions http;
  const LimitTargets t{.http = &http};
  auto st = ApplyLimits({"http.max_headerz=1"}, t);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("unknown --limit 'http.max_headerz'"), std::string::npos);
  EXPECT_NE(st.message().find("http.max_headers"), std::string::npos) << "lists the names";
  EXPECT_FALSE(ApplyLimits({"http.max_headers=0"}, t).ok());
  EXPECT_FALSE(ApplyLimits({"query.timeout=-1s"}, t).ok());
  EXPECT_FALSE(ApplyLimits({"write.max_body_bytes=lots"}, t).ok());
  EXPECT_FALSE(ApplyLimits({"http.max_headers"}, t).ok());
}

// A dedicated flag and --limit are one parser with one set of bounds: at the boundary and one
// past it, both ways.
TEST(Limits, DedicatedFlagsShareTheTablesBounds) {
  server::HttpOptions http;
  const LimitTargets t{.http = &http};
  ASSERT_TRUE(ApplyLimitFlag("--write-max-body", "1KiB", t).ok());
  EXPECT_EQ(http.max_write_body_bytes, 1024u);
  auto st = ApplyLimitFlag("--write-max-body", "1023", t);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "bad --write-max-body '1023': a size such as 64MiB, from 1KiB to 1GiB");
  EXPECT_TRUE(ApplyLimitFlag("--write-max-body", "1GiB", t).ok());
  EXPECT_FALSE(ApplyLimits({"write.max_body_bytes=1025MiB"}, t).ok());
  EXPECT_TRUE(ApplyLimitFlag("--max-series", "100000000", t).ok());
  EXPECT_EQ(http.remote_write.max_series, 100'000'000u);
  st = ApplyLimitFlag("--max-series", "100000001", t);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "bad --max-series '100000001': a whole number, from 1 to 100000000");
  EXPECT_FALSE(ApplyLimitFlag("--http-workers", "0", t).ok());
  EXPECT_TRUE(ApplyLimitFlag("--query-timeout", "1s", t).ok());
  EXPECT_EQ(http.query_timeout.count(), 1000);
  EXPECT_FALSE(ApplyLimitFlag("--query-timeout", "0s", t).ok());
  EXPECT_EQ(ApplyLimitFlag("--no-such-flag", "1", t).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace gpuwatch::cli
