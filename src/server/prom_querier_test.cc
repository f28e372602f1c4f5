#include "server/prom_querier.h"

#include <gtest/gtest.h>

namespace gpuwatch::server {
namespace {

// The selector sent to the cluster reads back as the same matchers, whatever the values hold.
TEST(PromQuerierTest, SelectorTextRoundTripsThroughThePromQLParser) {
  for (const char* text :
       {R"({__name__="DCGM_FI_DEV_GPU_TEMP",gpu!="3"})",
        R"({job=~"^(\"a\\\\b\"|c.1)$",Hostname!~"n[0-9]+"})", "{msg=\"line\\nbreak\"}"}) {
    auto m = store::ParseSelector(text);
    ASSERT_TRUE(m.ok()) << text << ": " << m.status().ToString();
    auto back = store::ParseSelector(SelectorText(*m));
    ASSERT_TRUE(back.ok()) << SelectorText(*m);
    ASSERT_EQ(back->size(), m->size());
    for (size_t i = 0; i < m->size(); ++i) {
      EXPECT_EQ((*back)[i].name(), (*m)[i].name());
      EXPECT_EQ((*back)[i].value(), (*m)[i].value()) << SelectorText(*m);
      EXPECT_EQ((*back)[i].op(), (*m)[i].op());
    }
  }
  EXPECT_EQ(SelectorText({}), R"({__name__=~".+"})");
}

// A cluster that is not there is an error naming it, never an empty answer.
TEST(PromQuerierTest, AnUnreachableClusterIsAnErrorNamingIt) {
  PromApiQuerier q({.url = "http://127.0.0.1:1",
                    .token = "",
                    .ca_file = "",
                    .timeout = std::chrono::seconds(2)});
  auto r = q.SelectRaw(*store::ParseSelector("up"), 0, 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("127.0.0.1:1"), std::string::npos) << r.status().message();
  EXPECT_TRUE(q.Coverage(store::Tier::k1m).empty());
  EXPECT_FALSE(q.Coverage(store::Tier::kRaw).empty());
}

}  // namespace
}  // namespace gpuwatch::server
