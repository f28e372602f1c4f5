#include "common/status.h"

#include <gtest/gtest.h>

namespace gpuwatch {
namespace {

Result<int> Half(int v) {
  if (v % 2) return Status::InvalidArgument("odd value " + std::to_string(v));
  return v / 2;
}

TEST(StatusTest, ResultCarriesValueOrError) {
  auto a = Half(4);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 2);
  auto b = Half(3);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status().ToString(), "InvalidArgument: odd value 3");
  EXPECT_EQ(b.value_or(-1), -1);
}

}  // namespace
}  // namespace gpuwatch
