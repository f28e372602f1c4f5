#include "server/remote_write_handler.h"

#include "common/log.h"
#include "common/strings.h"
#include "store/remote_write.h"

namespace gpuwatch::server {

HttpReply HandleRemoteWrite(store::Store* store, std::string_view body,
                            std::string_view content_encoding) {
  if (!content_encoding.empty() && ToLower(content_encoding) != "snappy")
    return {400, "remote-write: Content-Encoding must be snappy, not '" +
                     std::string(content_encoding) + "'\n"};
  auto decoded = store::DecodeRemoteWrite(body);
  if (!decoded.ok()) return {400, decoded.status().message() + "\n"};
  std::vector<store::Head::Input> batch;
  batch.reserve(decoded->size());
  for (auto& s : *decoded) {
    store::Head::Input in;
    in.labels = std::move(s.labels);
    in.samples.reserve(s.samples.size());
    for (const auto& x : s.samples) in.samples.push_back({x.timestamp_ms, x.value});
    batch.push_back(std::move(in));
  }
  auto r = store->Append(batch);
  if (!r.ok()) {
    GW_LOG_ERROR("remote-write: store write failed: {}", r.status().ToString());
    return {500, "store write failed: " + r.status().message() + "\n"};
  }
  if (r->out_of_order > 0 || r->invalid > 0) {
    return {400, fmt::format("{} samples stored, {} out of order, {} with invalid labels: {}\n",
                             r->accepted, r->out_of_order, r->invalid, r->first_error)};
  }
  return {204, ""};
}

}  // namespace gpuwatch::server
