#include "cli/config_file.h"

#include <gtest/gtest.h>

namespace gpuwatch::cli {
namespace {

TEST(ConfigFileTest, ParsesKeysCommentsAndQuotes) {
  auto kv = ParseConfig(
      "# agent\nlisten = 0.0.0.0:9470  # all interfaces\n\ndata-dir = \"/var/lib/gpuwatch\"\n",
      "gw.conf");
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_EQ(kv->at("listen"), "0.0.0.0:9470");
  EXPECT_EQ(kv->at("data-dir"), "/var/lib/gpuwatch");
}

TEST(ConfigFileTest, ErrorsNameTheLine) {
  auto kv = ParseConfig("listen = x\nbogus line\n", "gw.conf");
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().message(), "gw.conf:2: expected 'key = value'");
  auto dup = ParseConfig("a = 1\na = 2\n", "c");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("given twice"), std::string::npos);
}

TEST(ConfigFileTest, Durations) {
  EXPECT_EQ(*ParseDurationMs("1s"), 1000);
  EXPECT_EQ(*ParseDurationMs("500ms"), 500);
  EXPECT_EQ(*ParseDurationMs("1h"), 3600000);
  EXPECT_EQ(*ParseDurationMs("1.5h"), 5400000);
  EXPECT_FALSE(ParseDurationMs("200h").ok());  // beyond a week
  EXPECT_EQ(*ParseDurationMs("2m"), 120000);
  EXPECT_EQ(*ParseDurationMs("1.5"), 1500);
  EXPECT_FALSE(ParseDurationMs("fast").ok());
  EXPECT_FALSE(ParseDurationMs("-1s").ok());
  EXPECT_FALSE(ParseDurationMs("1ms").ok());
}

}  // namespace
}  // namespace gpuwatch::cli
