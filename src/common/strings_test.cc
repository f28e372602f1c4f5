#include "common/strings.h"

#include <gtest/gtest.h>

#include "common/launcher_tag.h"

namespace gpuwatch {
namespace {

TEST(StringsTest, ParseIntRejectsJunk) {
  EXPECT_EQ(ParseInt<int>(" 42\n"), 42);
  EXPECT_EQ(ParseInt<int>("42x"), std::nullopt);
  EXPECT_EQ(ParseInt<int>(""), std::nullopt);
  EXPECT_EQ(ParseInt<uint8_t>("300"), std::nullopt);
  EXPECT_EQ(ParseInt<uint64_t>("ff", 16), 255u);
}

TEST(StringsTest, SplitAnySkipsEmpty) {
  auto parts = SplitAny("  a  b\tc ", " \t");
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2], "c");
  auto kept = SplitAny("a,,b", ",", false);
  EXPECT_EQ(kept.size(), 3u);
}

TEST(StringsTest, ParseDouble) {
  EXPECT_DOUBLE_EQ(*ParseDouble("1.5"), 1.5);
  EXPECT_EQ(ParseDouble("1.5.2"), std::nullopt);
}

TEST(StringsTest, SanitizeUtf8) {
  EXPECT_EQ(SanitizeUtf8("plain"), "plain");
  EXPECT_EQ(SanitizeUtf8("caf\xc3\xa9"), "caf\xc3\xa9");  // é kept
  EXPECT_EQ(SanitizeUtf8("a\xff"
                         "b"),
            "a\xef\xbf\xbd"
            "b");                                                        // stray byte
  EXPECT_EQ(SanitizeUtf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");       // overlong '/'
  EXPECT_EQ(SanitizeUtf8("\xed\xa0\x80").substr(0, 3), "\xef\xbf\xbd");  // surrogate
  EXPECT_EQ(SanitizeUtf8("\xe2\x82"), "\xef\xbf\xbd\xef\xbf\xbd");       // truncated
  EXPECT_EQ(PrintableText("x\x1b[31my\n"), "x?[31my?");
}

TEST(StringsTest, ReadSmallFileMissing) {
  auto r = ReadSmallFile("/nonexistent/gpuwatch");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.err, ENOENT);
}

// mpirun --tag-output writes "[jobid,rank]<stdout>:" (Open MPI's orte/mca/iof docs); nccl-tests
// and pasted consoles carry "[pid]" prefixes; bus ids in brackets are not tags.
TEST(LauncherTagTest, TagsAndNotTags) {
  EXPECT_EQ(LauncherTagLength("[1,0]<stdout>:#  size"), 14u);
  EXPECT_EQ(LauncherTagLength("[1,3]<stderr>: x"), 14u);
  EXPECT_EQ(LauncherTagLength("[1,0]<stddiag>:"), 15u);
  EXPECT_EQ(LauncherTagLength("[80746] node:1:2"), 7u);
  EXPECT_EQ(LauncherTagLength("[0] x"), 3u);
  EXPECT_EQ(LauncherTagLength("[0x16] x"), 0u);
  EXPECT_EQ(LauncherTagLength("[0000:04:00] x"), 0u);
  EXPECT_EQ(LauncherTagLength("[1,] x"), 0u);
  EXPECT_EQ(LauncherTagLength("[12"), 0u);
  EXPECT_EQ(LauncherTagLength(""), 0u);
  EXPECT_EQ(LauncherTagLength("x[0]"), 0u);
}

}  // namespace
}  // namespace gpuwatch
