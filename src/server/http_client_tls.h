// TLS for gpuwatch's HTTP clients (cpp-httplib, built with OpenSSL on Debian): the agent's push
// to a hub and a hub's remote-write (HubPusher), and a hub's reads from a cluster
// (PromApiQuerier). One check of a URL and its CA file, and one way to verify the server.
#pragma once

#include <string>

#include "common/status.h"

namespace httplib {
class Client;
}

namespace gpuwatch::server {

// An http:// or https:// URL; a CA file only with https://, and readable. Errors say which.
Status CheckClientUrl(const std::string& url, const std::string& ca_file);

// For an https:// base URL: verify the server's certificate against the system's CA store, or
// the bundle `ca_file` names. Nothing for http://.
void VerifyServer(httplib::Client& c, const std::string& base_url, const std::string& ca_file);

}  // namespace gpuwatch::server
