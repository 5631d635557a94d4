// The pod identity the plugin leaves in RUN/identity, as node/ reads it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "node/pod_identity_file.hpp"

namespace cushare::tools {
namespace {

TEST(PodIdentityFile, OnlyAFileTheNodeWroteIsBelieved) {
  namespace fs = std::filesystem;
  const fs::path run = fs::temp_directory_path() / ("cushare-identity-" + std::to_string(getpid()));
  fs::remove_all(run);
  fs::create_directories(run / "identity");
  fs::permissions(run / "identity", fs::perms(0755));
  auto write = [&](const std::string& name, const std::string& text, fs::perms mode) {
    std::ofstream(run / "identity" / name) << text;
    fs::permissions(run / "identity" / name, mode);
  };
  const auto good = shm::format_pod_identity({"trainer-0", "ml", "main"});
  write("a1", good, fs::perms(0644));
  EXPECT_EQ(read_pod_identity(run, "a1"), (shm::PodIdentity{"trainer-0", "ml", "main"}));
  write("a2", good, fs::perms(0666));  // writable by others: anyone could have named it
  EXPECT_FALSE(read_pod_identity(run, "a2"));
  fs::create_symlink(run / "identity" / "a1", run / "identity" / "a3");
  EXPECT_FALSE(read_pod_identity(run, "a3"));
  write("a4", "{\"pod\": 1}", fs::perms(0644));
  EXPECT_FALSE(read_pod_identity(run, "a4"));
  EXPECT_FALSE(read_pod_identity(run, "a5"));  // none yet
  fs::permissions(run / "identity", fs::perms(0777));
  EXPECT_FALSE(read_pod_identity(run, "a1"));
  fs::remove_all(run);
}

}  // namespace
}  // namespace cushare::tools
