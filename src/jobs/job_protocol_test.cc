#include "jobs/job_protocol.h"

#include <gtest/gtest.h>

#include <string>

namespace gpuwatch::jobs {
namespace {

constexpr double kNow = 1764460800.0;

LineResult Parse(const std::string& s) { return ParseJobLine(s, kNow); }

void ExpectReject(const std::string& line, RejectReason want) {
  LineResult r = Parse(line);
  EXPECT_FALSE(r.ok) << line;
  EXPECT_EQ(RejectReasonName(r.reason), RejectReasonName(want)) << line << ": " << r.detail;
}

TEST(JobProtocolTest, StartWithEveryField) {
  LineResult r = Parse(
      R"({"type":"start","job":"12345","rank":3,"template":"llama-8b","user":"alice",)"
      R"("project":"nlp","world_size":8,"local_rank":3,"pid":41233,"log_files":["/a/b.log"],"t":1764460799.5})");
  ASSERT_TRUE(r.ok) << r.detail;
  const auto& m = r.message;
  EXPECT_EQ(m.type, model::JobMessageType::kStart);
  EXPECT_EQ(m.job, "12345");
  EXPECT_EQ(m.rank, 3u);
  EXPECT_EQ(m.template_name, "llama-8b");
  EXPECT_EQ(m.user, "alice");
  EXPECT_EQ(m.project, "nlp");
  EXPECT_EQ(m.world_size, 8u);
  EXPECT_EQ(m.local_rank, 3u);
  EXPECT_EQ(m.pid, 41233u);
  ASSERT_EQ(m.log_files.size(), 1u);
  EXPECT_EQ(m.log_files[0], "/a/b.log");
  EXPECT_DOUBLE_EQ(*m.t_s, 1764460799.5);
}

TEST(JobProtocolTest, StepWithPartsAndScalars) {
  LineResult r =
      Parse(R"({"type":"step","job":"j","rank":0,"step":1200,"duration_s":0.812,"samples":256,)"
            R"("data_wait_s":0.011,"comm_s":0.104,"checkpoint_s":0,"loss":2.3141,"grad_norm":1.07,)"
            R"("scalars":{"lr":0.0003,"tokens":524288}})");
  ASSERT_TRUE(r.ok) << r.detail;
  const auto& s = r.message.step;
  EXPECT_EQ(s.step, 1200u);
  EXPECT_DOUBLE_EQ(s.duration_s, 0.812);
  EXPECT_DOUBLE_EQ(*s.samples, 256);
  EXPECT_DOUBLE_EQ(*s.data_wait_s, 0.011);
  EXPECT_DOUBLE_EQ(*s.comm_s, 0.104);
  EXPECT_DOUBLE_EQ(*s.checkpoint_s, 0);
  EXPECT_DOUBLE_EQ(*s.loss, 2.3141);
  EXPECT_DOUBLE_EQ(*s.grad_norm, 1.07);
  ASSERT_EQ(s.scalars.size(), 2u);
  EXPECT_DOUBLE_EQ(*r.message.t_s, kNow);  // no t: the receive time
}

TEST(JobProtocolTest, OtherTypes) {
  auto p = Parse(R"({"type":"phase","job":"j","name":"eval","state":"begin"})");
  ASSERT_TRUE(p.ok) << p.detail;
  EXPECT_EQ(p.message.name, "eval");
  EXPECT_TRUE(p.message.begin);
  auto c = Parse(R"({"type":"checkpoint","job":"j","state":"end"})");
  ASSERT_TRUE(c.ok);
  EXPECT_FALSE(c.message.begin);
  auto e = Parse(R"({"type":"end","job":"j","exit_code":-11})");
  ASSERT_TRUE(e.ok);
  EXPECT_EQ(e.message.exit_code, -11);
  auto a = Parse(R"({"type":"annotation","job":"j","text":"switched to TP=4"})");
  ASSERT_TRUE(a.ok);
  EXPECT_EQ(a.message.text, "switched to TP=4");
  auto l = Parse(R"({"type":"log","job":"j","stream":"stderr","line":"NCCL WARN x\ty"})");
  ASSERT_TRUE(l.ok) << l.detail;
  EXPECT_EQ(l.message.text, "NCCL WARN x\ty");
  EXPECT_EQ(l.message.stream, "stderr");
  // Unknown fields are ignored; v 1 is accepted.
  EXPECT_TRUE(Parse(R"({"v":1,"type":"end","job":"j","future":{"x":1}})").ok);
}

TEST(JobProtocolTest, RejectsWithTheRightReason) {
  ExpectReject("not json", RejectReason::kMalformed);
  ExpectReject("[1,2]", RejectReason::kMalformed);
  ExpectReject(R"({"type":"step","job":"j","step":1,"duration_s":NaN})", RejectReason::kMalformed);
  ExpectReject("{\"type\":\"end\",\"job\":\"\xff\xfe\"}", RejectReason::kMalformed);
  ExpectReject(R"({"type":"end","job":"j","x":[[[[1]]]]})", RejectReason::kMalformed);
  ExpectReject(R"({"v":2,"type":"end","job":"j"})", RejectReason::kBadVersion);
  ExpectReject(R"({"job":"j"})", RejectReason::kUnknownType);
  ExpectReject(R"({"type":"reboot","job":"j"})", RejectReason::kUnknownType);
  ExpectReject(R"({"type":"end"})", RejectReason::kBadField);
  ExpectReject(R"({"type":"end","job":""})", RejectReason::kBadField);
  ExpectReject(R"({"type":"end","job":"a\u0001b"})", RejectReason::kBadField);
  ExpectReject(R"({"type":"end","job":"j","rank":-1})", RejectReason::kBadField);
  ExpectReject(R"({"type":"end","job":"j","rank":1.5})", RejectReason::kBadField);
  ExpectReject(R"({"type":"end","job":"j","rank":1048576})", RejectReason::kBadField);
  ExpectReject(R"({"type":"step","job":"j","duration_s":1})", RejectReason::kBadField);
  ExpectReject(R"({"type":"step","job":"j","step":1})", RejectReason::kBadField);
  ExpectReject(R"({"type":"step","job":"j","step":1,"duration_s":0})", RejectReason::kBadField);
  ExpectReject(R"({"type":"step","job":"j","step":1,"duration_s":-1})", RejectReason::kBadField);
  // A number beyond double's range is a JSON parse error.
  ExpectReject(R"({"type":"step","job":"j","step":1,"duration_s":1e400})",
               RejectReason::kMalformed);
  ExpectReject(R"({"type":"step","job":"j","step":1,"duration_s":"1"})", RejectReason::kBadField);
  ExpectReject(R"({"type":"step","job":"j","step":1,"duration_s":1,"data_wait_s":2})",
               RejectReason::kBadField);
  ExpectReject(R"({"type":"step","job":"j","step":1,"duration_s":1,"scalars":{"1x":1}})",
               RejectReason::kBadField);
  ExpectReject(R"({"type":"step","job":"j","step":1,"duration_s":1,"scalars":{"x":"y"}})",
               RejectReason::kBadField);
  ExpectReject(R"({"type":"start","job":"j","pid":0})", RejectReason::kBadField);
  ExpectReject(R"({"type":"start","job":"j","log_files":["relative.log"]})",
               RejectReason::kBadField);
  ExpectReject(R"({"type":"phase","job":"j","name":"a b","state":"begin"})",
               RejectReason::kBadField);
  ExpectReject(R"({"type":"phase","job":"j","name":"eval","state":"maybe"})",
               RejectReason::kBadField);
  ExpectReject(R"({"type":"log","job":"j","stream":"stdin","line":"x"})", RejectReason::kBadField);
  ExpectReject(R"({"type":"annotation","job":"j"})", RejectReason::kBadField);
  ExpectReject(R"({"type":"end","job":"j","t":1764457100})", RejectReason::kBadTime);
  ExpectReject(R"({"type":"end","job":"j","t":1764461200})", RejectReason::kBadTime);
}

TEST(JobProtocolTest, HostileSizes) {
  std::string big_job = R"({"type":"end","job":")" + std::string(10 << 20, 'a') + "\"}";
  ExpectReject(big_job, RejectReason::kOversized);
  DatagramResult d = ParseJobDatagram(big_job, kNow);
  EXPECT_EQ(d.rejected[static_cast<size_t>(RejectReason::kOversized)], 1u);
  EXPECT_TRUE(d.messages.empty());
  ExpectReject(R"({"type":"end","job":")" + std::string(129, 'a') + "\"}", RejectReason::kBadField);
  std::string scalars = R"({"type":"step","job":"j","step":1,"duration_s":1,"scalars":{)";
  for (int i = 0; i < 33; ++i)
    scalars += (i ? "," : "") + std::string("\"s") + std::to_string(i) + "\":1";
  ExpectReject(scalars + "}}", RejectReason::kBadField);
  // 60 KB of '[' is refused before the JSON parser sees it.
  ExpectReject(std::string(60000, '['), RejectReason::kMalformed);
  // Binary bytes.
  std::string bin;
  for (int i = 0; i < 256; ++i) bin += static_cast<char>(i);
  ExpectReject(bin, RejectReason::kMalformed);
}

TEST(JobProtocolTest, DatagramOfManyLinesJudgedOneByOne) {
  std::string d = R"({"type":"step","job":"j","step":1,"duration_s":0.1})"
                  "\n\n"
                  "garbage\r\n"
                  R"({"type":"step","job":"j","step":2,"duration_s":0.1})"
                  "\r\n"
                  R"({"type":"step","job":"j","step":3,"duration_s":0.1})";  // no final newline
  DatagramResult r = ParseJobDatagram(d, kNow);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[2].step.step, 3u);
  EXPECT_EQ(r.rejected[static_cast<size_t>(RejectReason::kMalformed)], 1u);
  EXPECT_FALSE(r.first_detail.empty());
}

}  // namespace
}  // namespace gpuwatch::jobs

namespace gpuwatch::jobs {
namespace {

TEST(JobProtocolSchedulerTest, QueuedAllocationRelease) {
  auto q = ParseJobLine(R"({"v":1,"type":"queued","job":"7","user":"bob","project":"cv"})", kNow);
  ASSERT_TRUE(q.ok) << q.detail;
  EXPECT_EQ(q.message.type, model::JobMessageType::kQueued);
  EXPECT_EQ(q.message.project, "cv");
  auto a = ParseJobLine(R"({"type":"allocation","job":"4242","user":"alice","project":"nlp",)"
                        R"("template":"train","devices":[0,3],"submit_t":1764400000,)"
                        R"("t":1764460790})",
                        kNow);
  ASSERT_TRUE(a.ok) << a.detail;
  EXPECT_EQ(a.message.type, model::JobMessageType::kAllocation);
  EXPECT_EQ(a.message.devices, (std::vector<uint32_t>{0, 3}));
  EXPECT_DOUBLE_EQ(*a.message.submit_t_s, 1764400000);  // a queue of 17 h is taken
  auto r = ParseJobLine(R"({"type":"release","job":"4242","exit_code":1})", kNow);
  ASSERT_TRUE(r.ok) << r.detail;
  EXPECT_EQ(r.message.exit_code, 1);
  for (const char* bad : {
           R"({"type":"allocation","job":"1","devices":[0]})",               // no owner
           R"({"type":"allocation","job":"1","user":"a","devices":[256]})",  // not a minor
           R"({"type":"allocation","job":"1","user":"a","devices":"0,1"})",
           R"({"type":"allocation","job":"1","user":"a","submit_t":1764460900,"t":1764460790})",
       }) {
    auto b = ParseJobLine(bad, kNow);
    EXPECT_FALSE(b.ok) << bad;
    EXPECT_EQ(b.reason, RejectReason::kBadField) << bad << ": " << b.detail;
  }
}

}  // namespace
}  // namespace gpuwatch::jobs
