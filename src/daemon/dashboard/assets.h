// The dashboard's files (web/ and the chart library from npm), embedded in
// gpusliced at build time: embed_assets.py generates their definitions
// (dashboard_assets.cc in the build tree) from the files themselves.
//
// Thread safety: constant data.
#pragma once

#include <span>
#include <string_view>

namespace gpuslice::daemon {

struct DashboardAsset {
  std::string_view name;          // "app.js": the last segment of its URL
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view body;
};

// Every embedded file, sorted by name; index.html among them, its asset URLs
// already carrying the version.
std::span<const DashboardAsset> DashboardAssets();
// A hash of every asset but index.html: the "{version}" of their URLs
// (/dashboard/{version}/{name}), so that they can be cached for good.
std::string_view DashboardAssetsVersion();
// Whether the chart library was there at build time; without it a stub
// stands in and the page says that its charts are missing.
bool ChartLibraryEmbedded();

}  // namespace gpuslice::daemon
