// The tokens file (issue 19): its form, what it refuses and why, and that no message holds a
// token.
#include "server/tokens.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gpuwatch::server
