// The dashboard's files, embedded in the binary at build time (web/CMakeLists.txt builds them
// with esbuild from npm packages and web/embed_web.cmake writes them into gw_web). Served at `/`
// and `/assets/…` with no CDN: the page works offline.
#pragma once

#include <string_view>
#include <vector>

namespace gpuwatch::server {

struct DashboardAsset {
  std::string_view path;  // "/", "/assets/app.js", "/assets/app.css"
  std::string_view content_type;
  std::string_view body;
};

// Every file to serve. Without a dashboard build, only "/", a page that says why.
std::vector<DashboardAsset> DashboardAssets();
// Why the dashboard was not built ("" when it was).
std::string_view DashboardNotBuiltReason();

}  // namespace gpuwatch::server
