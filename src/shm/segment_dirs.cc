#include "shm/segment_dirs.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "common/str_cat.h"
#include "shm/group_segment.h"

namespace gpuslice {
namespace {

Status MakeDirWithMode(const std::string& dir, mode_t mode) {
  if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    return Unavailable("cannot create " + dir + ": " + strerror(errno));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Unavailable(dir + " is not a directory");
  }
  if ((st.st_mode & 07777) != mode && chmod(dir.c_str(), mode) != 0) {  // umask, or a stale mode
    return Unavailable("cannot chmod " + dir + ": " + strerror(errno));
  }
  return Status::Ok();
}

bool SingleComponent(std::string_view group) {
  return !group.empty() && group != "." && group != ".." &&
         group.find('/') == std::string_view::npos && group.find('\0') == std::string_view::npos;
}

}  // namespace

std::string ClaimSegmentDir(const std::string& shm_dir, std::string_view group) {
  return shm_dir + "/" + kClaimDirsName + "/" + std::string(group);
}

Status MakeClaimSegmentDir(const std::string& shm_dir, std::string_view group) {
  if (!SingleComponent(group)) {
    return InvalidArgument(StrCat({"\"", group, "\" cannot name a segment directory"}));
  }
  if (mkdir(shm_dir.c_str(), 01777) == 0) chmod(shm_dir.c_str(), 01777);
  GS_RETURN_IF_ERROR(MakeDirWithMode(shm_dir + "/" + kClaimDirsName, 0711));
  return MakeDirWithMode(ClaimSegmentDir(shm_dir, group), 01777);
}

Status RemoveClaimSegmentDir(const std::string& shm_dir, std::string_view group) {
  if (!SingleComponent(group)) return Status::Ok();
  const std::string dir = ClaimSegmentDir(shm_dir, group);
  std::set<std::string> segments;
  for (const std::string& g : GroupSegment::ListGroups(dir)) {
    segments.insert(GroupSegment::PathFor(dir, g));
    auto removed = GroupSegment::RemoveIfAbandoned(dir, g, /*grace_ns=*/0,
                                                   std::numeric_limits<int64_t>::max());
    if (!removed.ok()) return removed.status();
  }
  // Whatever else the claim's tenants left there (the directory was theirs).
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (segments.contains(entry.path().string())) continue;
    std::filesystem::remove_all(entry.path(), ec);  // does not follow links
  }
  if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return Status::Ok();
  if (errno == ENOTEMPTY || errno == EEXIST) {
    return FailedPrecondition(dir + " still holds a segment in use");
  }
  return Unavailable("cannot remove " + dir + ": " + strerror(errno));
}

std::vector<std::string> GroupSegmentDirs(const std::string& shm_dir) {
  std::vector<std::string> dirs;
  const std::string claims = shm_dir + "/" + kClaimDirsName;
  if (DIR* d = opendir(claims.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string path = claims + "/" + std::string(name);
      struct stat st {};
      if (lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) dirs.push_back(path);
    }
    closedir(d);
  }
  std::sort(dirs.begin(), dirs.end());
  dirs.push_back(shm_dir);
  return dirs;
}

std::string SegmentDirOf(const std::string& shm_dir, std::string_view group) {
  if (!SingleComponent(group)) return shm_dir;
  const std::string claim = ClaimSegmentDir(shm_dir, group);
  struct stat st {};
  return lstat(GroupSegment::PathFor(claim, group).c_str(), &st) == 0 ? claim : shm_dir;
}

std::vector<std::string> ListAllGroups(const std::string& shm_dir) {
  std::set<std::string> groups;
  for (const std::string& dir : GroupSegmentDirs(shm_dir)) {
    for (std::string& g : GroupSegment::ListGroups(dir)) groups.insert(std::move(g));
  }
  return {groups.begin(), groups.end()};
}

}  // namespace gpuslice
