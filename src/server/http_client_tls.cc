#include "server/http_client_tls.h"

#include <httplib.h>
#include <unistd.h>

namespace gpuwatch::server {

Status CheckClientUrl(const std::string& url, const std::string& ca_file) {
  const bool tls = url.starts_with("https://");
  if (!tls && !url.starts_with("http://"))
    return Status::InvalidArgument(url + ": an http:// or https:// URL");
  if (!ca_file.empty() && !tls)
    return Status::InvalidArgument("a CA file is for an https:// URL, not " + url);
  if (!ca_file.empty() && access(ca_file.c_str(), R_OK) != 0)
    return Status::InvalidArgument("cannot read the CA file " + ca_file);
  return Status::Ok();
}

void VerifyServer(httplib::Client& c, const std::string& base_url, const std::string& ca_file) {
  if (!base_url.starts_with("https://")) return;
  c.enable_server_certificate_verification(true);
  if (!ca_file.empty()) c.set_ca_cert_path(ca_file);
}

}  // namespace gpuwatch::server
