// The tokens file (issue 19): its form, what it refuses and why, and that no message holds a
// token.
#include "server/tokens.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/time_base.h"
#include "store/testing/scratch_dir.h"

namespace gpuwatch::server {
namespace {

const std::string kHex32(32, 'c');  // 128 bits as hex

TEST(TokensTest, TheIssuesFormWithCommentsAndBlankLines) {
  const std::string b64 = "q83vEjRWeJCrze8SNFZ4kA";  // 22 base64 characters: 132 bits
  auto t = ParseTokens("# tokens for node7\n\n" + kHex32 + " read\n" + b64 +
                           "   write   # the agents\n" + std::string(64, 'e') + " admin\r\n" +
                           std::string(40, 'f') + " read nlp,vision\n" + std::string(48, '0') +
                           " read nlp expires=2027-01-01T00:00:00Z\n" + std::string(44, '1') +
                           " write expires=1800000000\n",
                       "tokens");
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->entries.size(), 6u);
  EXPECT_EQ(t->entries[0].role, Role::kRead);
  EXPECT_EQ(t->entries[0].line, 3);
  EXPECT_EQ(t->entries[0].principal, "read@tokens:3");
  EXPECT_EQ(t->entries[1].token, b64);
  EXPECT_EQ(t->entries[1].role, Role::kWrite);
  EXPECT_EQ(t->entries[2].role, Role::kAdmin);
  EXPECT_TRUE(t->entries[2].projects.empty());
  EXPECT_EQ(t->entries[3].projects, (std::vector<std::string>{"nlp", "vision"}));
  EXPECT_EQ(t->entries[4].projects, (std::vector<std::string>{"nlp"}));
  EXPECT_EQ(t->entries[4].expires_ms, int64_t{1798761600000});
  EXPECT_TRUE(t->entries[5].projects.empty());
  EXPECT_EQ(t->entries[5].expires_ms, int64_t{1800000000000});
  EXPECT_EQ(t->Find(kHex32), &t->entries[0]);
  EXPECT_EQ(t->Find(std::string(40, 'f')), &t->entries[3]);
  EXPECT_EQ(t->Find(std::string(31, 'c')), nullptr);
  EXPECT_EQ(t->Find(""), nullptr);
}

TEST(TokensTest, BadLinesAreRefusedWithTheirLineAndNeverTheToken) {
  struct Case {
    std::string text, want;
  };
  const std::string weak = "password-password-password-pass";  // '-' and letters: base64url...
  for (const Case& c : std::vector<Case>{
           {kHex32 + "\n", "tokens:1: expected TOKEN ROLE"},
           {"\n" + kHex32 + " reader\n", "tokens:2: unknown role \"reader\""},
           {std::string(31, 'a') + " read\n", "less than 128 bits"},                // 124 bits
           {"hunter2hunter2hunter2hunter2hunter2!! read\n", "less than 128 bits"},  // '!'
           {kHex32 + " read\n" + kHex32 + " admin\n", "tokens:2: the same token"},
           {kHex32 + " read nlp vision\n", "unexpected field \"vision\""},
           {kHex32 + " read nlp,,vision\n", "bad project name \"\""},
           {kHex32 + " read n\"lp\n", "bad project name"},
           {kHex32 + " read expires=soon\n", "expires="},
           {kHex32 + " read expires=1 expires=2\n", "given twice"},
           {std::string(600, 'a') + " read\n", "longer than 512"},
       }) {
    auto t = ParseTokens(c.text, "tokens");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_NE(t.status().message().find(c.want), std::string::npos) << t.status().message();
    // The first field is the token (or what was meant to be one): never in a message.
    const std::string first = c.text.substr(c.text.find_first_not_of('\n'), 20);
    EXPECT_EQ(t.status().message().find(first.substr(0, first.find(' '))), std::string::npos)
        << t.status().message();
  }
  // 31 base64url characters hold 186 bits: a long passphrase of letters is accepted by
  // alphabet; the file is the operator's, and `gpuwatch token new` is what the docs show.
  EXPECT_TRUE(ParseTokens(weak + " read\n", "t").ok());
}

TEST(TokensTest, BitsByAlphabet) {
  EXPECT_EQ(TokenBits(std::string(32, 'a')), 128);
  EXPECT_EQ(TokenBits("ABCDEFGHIJKLMNOPQRSTUV"), 132);
  EXPECT_EQ(TokenBits("ABCDEFGHIJKLMNOPQRSTUV=="), 132);  // padding carries nothing
  EXPECT_EQ(TokenBits("abc def"), 0);
  EXPECT_EQ(TokenBits(""), 0);
}

TEST(TokensTest, NewTokenLinesParseAndDiffer) {
  auto a = NewTokenLine(Role::kRead, {"nlp", "vision"});
  auto b = NewTokenLine(Role::kAdmin, {});
  ASSERT_TRUE(a.ok() && b.ok());
  auto t = ParseTokens(*a + "\n" + *b + "\n", "new");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->entries[0].projects, (std::vector<std::string>{"nlp", "vision"}));
  EXPECT_EQ(t->entries[1].role, Role::kAdmin);
  EXPECT_EQ(t->entries[0].token.size(), 64u);
  EXPECT_NE(t->entries[0].token, t->entries[1].token);
  EXPECT_FALSE(NewTokenLine(Role::kRead, {"a b"}).ok());
}

// A token's id is a digest, not the token: 16 hex digits, stable, different per token.
TEST(TokensTest, TheIdSaysNothingOfTheToken) {
  // SHA-256("abc") begins ba7816bf8f01cfea (FIPS 180-2, appendix B.1).
  EXPECT_EQ(TokenId("abc"), "ba7816bf8f01cfea");
  EXPECT_EQ(TokenId(kHex32).size(), 16u);
  EXPECT_EQ(TokenId(kHex32), TokenId(kHex32));
  EXPECT_NE(TokenId(kHex32), TokenId(std::string(32, 'd')));
  EXPECT_EQ(TokenId(kHex32).find("cccc"), std::string::npos);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The admin API's changes: an added line keeps every other line (comments too) and the file's
// mode 0600, and is in the table at once; a revoked line goes, and only it; a change that
// would not load is never written.
TEST(TokensTest, AddAndRevokeRewriteOneLineAndKeepTheRest) {
  const std::string dir = store::testing::FreshScratchDir("tokens_admin");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tokens";
  const std::string original =
      "# the fleet's tokens\n" + kHex32 + " read  # grafana\n" + std::string(64, 'e') + " admin\n";
  { std::ofstream(path) << original; }
  ::chmod(path.c_str(), 0600);
  auto file = TokensFile::Open(path, std::chrono::hours(1));
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto& f = **file;
  auto added = f.Add(Role::kRead, {"nlp"}, int64_t{4102444800000}, "admin@tokens:3");
  ASSERT_TRUE(added.ok()) << added.status().message();
  EXPECT_EQ(added->role, Role::kRead);
  EXPECT_EQ(added->projects, std::vector<std::string>{"nlp"});
  EXPECT_EQ(added->expires_ms, int64_t{4102444800000});
  EXPECT_EQ(added->line, 4);
  EXPECT_GE(TokenBits(added->token), 256);
  // In the table now, without waiting for the re-check.
  ASSERT_EQ(f.Current()->entries.size(), 3u);
  EXPECT_NE(f.Current()->Find(added->token), nullptr);
  const std::string text = ReadAll(path);
  EXPECT_TRUE(text.starts_with(original)) << text;
  EXPECT_NE(text.find(added->token + " read nlp expires=2100-01-01T00:00:00Z  # added by "
                                     "admin@tokens:3 at "),
            std::string::npos)
      << text;
  struct stat sb {};
  ASSERT_EQ(::stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // The file reloads as it was written.
  EXPECT_TRUE(LoadTokensFile(path).ok());

  // Revoking the first token leaves the comment, the admin line and the added one.
  auto revoked = f.Revoke(TokenId(kHex32));
  ASSERT_TRUE(revoked.ok()) << revoked.status().message();
  EXPECT_EQ(revoked->token, kHex32);
  EXPECT_EQ(f.Current()->Find(kHex32), nullptr);
  EXPECT_NE(f.Current()->Find(added->token), nullptr);
  const std::string after = ReadAll(path);
  EXPECT_EQ(after.find(kHex32), std::string::npos);
  EXPECT_TRUE(after.starts_with("# the fleet's tokens\n" + std::string(64, 'e') + " admin\n"))
      << after;
  EXPECT_EQ(f.Revoke(TokenId(kHex32)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(f.Revoke("0123456789abcdef").status().code(), StatusCode::kNotFound);
  // A bad project is refused and nothing is written.
  EXPECT_EQ(f.Add(Role::kRead, {"a b"}, std::nullopt, "x").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadAll(path), after);
  // An operator's edit between two changes is kept.
  { std::ofstream(path, std::ios::app) << std::string(40, 'a') << " write  # rack 7\n"; }
  ASSERT_TRUE(f.Add(Role::kWrite, {}, std::nullopt, "admin@tokens:2").ok());
  EXPECT_NE(ReadAll(path).find(std::string(40, 'a') + " write  # rack 7\n"), std::string::npos);
  EXPECT_EQ(f.Current()->entries.size(), 4u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpuwatch::server
