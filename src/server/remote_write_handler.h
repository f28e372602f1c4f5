// POST /api/v1/write: the Prometheus remote-write 1.0 receiver, transport-agnostic (the HTTP
// layer passes the body and headers in and sends the reply out).
//
// Replies as Prometheus's own receiver does: 204 when everything was stored; 400 with the
// reason for a body that does not decode or samples that were rejected (out of order, bad
// labels — the rest of the request is stored; senders do not retry a 400); 500 when the store
// could not write (disk full: senders retry). Thread-safe (the store serializes appends).
#pragma once

#include <string>
#include <string_view>

#include "store/store.h"

namespace gpuwatch::server {

struct HttpReply {
  int status = 200;
  std::string body;
};

HttpReply HandleRemoteWrite(store::Store* store, std::string_view body,
                            std::string_view content_encoding);

}  // namespace gpuwatch::server
