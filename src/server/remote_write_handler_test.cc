#include "server/remote_write_handler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "store/remote_write.h"

namespace gpuwatch::server {
namespace {

TEST(RemoteWriteHandlerTest, StoresAndReplies) {
  const std::string dir = ::testing::TempDir() + "/rw_handler_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  store::StoreOptions o;
  o.background = false;
  auto head = store::Store::Open(dir, o);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  store::RemoteSeries s;
  s.labels = {{"__name__", "DCGM_FI_DEV_GPU_UTIL"}, {"gpu", "0"}};
  s.samples = {{1000, 97}, {2000, 98}};
  auto r = HandleRemoteWrite(head->get(), store::EncodeRemoteWrite({s}), "snappy");
  EXPECT_EQ(r.status, 204) << r.body;
  EXPECT_EQ((*head)->Stats().samples, 2u);

  // The same request again: duplicates, still a success (a sender's retry).
  r = HandleRemoteWrite(head->get(), store::EncodeRemoteWrite({s}), "snappy");
  EXPECT_EQ(r.status, 204) << r.body;

  s.samples = {{500, 1}};
  r = HandleRemoteWrite(head->get(), store::EncodeRemoteWrite({s}), "snappy");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("1 out of order"), std::string::npos) << r.body;

  r = HandleRemoteWrite(head->get(), "garbage", "snappy");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("remote-write:"), std::string::npos) << r.body;
  r = HandleRemoteWrite(head->get(), store::EncodeRemoteWrite({s}), "gzip");
  EXPECT_EQ(r.status, 400);
  head->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpuwatch::server
