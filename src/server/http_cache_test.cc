#include "server/http_cache.h"

#include <gtest/gtest.h>

namespace gpuwatch::server {
namespace {

TEST(HttpCacheTest, EtagIsQuotedAndFollowsTheBytes) {
  const std::string a = AssetEtag("console.log(1)");
  EXPECT_EQ(a.front(), '"');
  EXPECT_EQ(a.back(), '"');
  EXPECT_EQ(a, AssetEtag("console.log(1)"));
  EXPECT_NE(a, AssetEtag("console.log(2)"));
  EXPECT_NE(AssetEtag(""), AssetEtag(std::string(1, '\0')));
  // FNV-1a 64 of the empty string is its offset basis: the tag does not depend on the build.
  EXPECT_EQ(AssetEtag(""), "\"0-cbf29ce484222325\"");
}

TEST(HttpCacheTest, IfNoneMatchListsAndWeakForms) {
  const std::string tag = "\"1f-00000000000000aa\"";
  EXPECT_TRUE(EtagMatches(tag, tag));
  EXPECT_TRUE(EtagMatches("W/" + tag, tag));
  EXPECT_TRUE(EtagMatches("\"x\", " + tag, tag));
  EXPECT_TRUE(EtagMatches(" \"x\" ,\t" + tag + " ", tag));
  EXPECT_TRUE(EtagMatches("*", tag));
  EXPECT_FALSE(EtagMatches("", tag));
  EXPECT_FALSE(EtagMatches("\"x\"", tag));
  EXPECT_FALSE(EtagMatches("1f-00000000000000aa", tag));  // unquoted: not the same tag
  EXPECT_FALSE(EtagMatches(",,", tag));
}

}  // namespace
}  // namespace gpuwatch::server
