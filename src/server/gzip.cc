#include "server/gzip.h"

#include <zlib.h>

#include "common/strings.h"

namespace gpuwatch::server {

Result<std::string> GzipCompress(std::string_view data, int level) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return Status::Internal("deflateInit2 failed");
  std::string out;
  out.resize(deflateBound(&zs, static_cast<uLong>(data.size())));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return Status::Internal("deflate did not finish: " + std::to_string(rc));
  out.resize(zs.total_out);
  return out;
}

Result<std::string> GzipDecompress(std::string_view data) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return Status::Internal("inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[16384];
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;
  }
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) return Status::Corruption("not a complete gzip stream");
  return out;
}

bool AcceptsGzip(std::string_view accept_encoding) {
  for (auto item : SplitAny(accept_encoding, ",")) {
    auto parts = SplitAny(item, ";");
    if (parts.empty() || ToLower(TrimWhitespace(parts[0])) != "gzip") continue;
    bool refused = false;
    for (size_t i = 1; i < parts.size(); ++i) {
      auto p = TrimWhitespace(parts[i]);
      if (StartsWith(p, "q=")) {
        auto q = ParseDouble(p.substr(2));
        refused = !q || *q <= 0;
      }
    }
    if (!refused) return true;
  }
  return false;
}

}  // namespace gpuwatch::server
