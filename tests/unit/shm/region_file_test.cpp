// Region files: exclusive create, modes, open/validate, corrupt files, the
// standalone open-or-create race.
#include "shm/region_file.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "shm/limits_seqlock.hpp"
#include "test_util.hpp"

namespace cushare::shm {
namespace {

using test::TempDir;

// Overwrites `len` bytes at `offset` of a file.
void poke(const std::filesystem::path& p, off_t offset, const void* data, size_t len) {
  const int fd = ::open(p.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, data, len, offset), static_cast<ssize_t>(len));
  ::close(fd);
}

template <class Fn>
RegionError catch_region_error(Fn fn) {
  try {
    fn();
  } catch (const RegionError& e) {
    return e;
  }
  ADD_FAILURE() << "no RegionError thrown";
  return RegionError(RegionErrorCode::kIo, "", "none");
}

TEST(ShmRegionFile, CreateFillsHeaderAndPublishesMagic) {
  TempDir dir;
  const auto path = dir / "limits";
  auto m = LimitsMapping::create(path, {"alloc-42", kCreatedStandalone}, [](LimitsRegion& r) {
    init_gpu_entry(r, 0, "GPU-x", {.memory_limit_bytes = 123});
  });
  EXPECT_TRUE(m.created());
  EXPECT_TRUE(m.writable());
  const auto& h = m.region().header;
  EXPECT_EQ(h.magic.load(), kLimitsMagic);
  EXPECT_EQ(h.layout_version, kLayoutVersion);
  EXPECT_EQ(h.header_size, sizeof(RegionHeader));
  EXPECT_EQ(h.total_size, sizeof(LimitsRegion));
  EXPECT_STREQ(h.alloc_id, "alloc-42");
  EXPECT_EQ(h.creator_pid, static_cast<std::uint32_t>(getpid()));
  EXPECT_EQ(h.flags, static_cast<std::uint32_t>(kCreatedStandalone));
  EXPECT_GT(h.created_unix_ns, 0u);
  EXPECT_EQ(std::filesystem::file_size(path), sizeof(LimitsRegion));

  auto ro = LimitsMapping::open(path, Access::kReadOnly);
  EXPECT_FALSE(ro.writable());
  EXPECT_FALSE(ro.created());
  EXPECT_EQ(ro.region().gpus[0].memory_limit_bytes.load(), 123u);
  EXPECT_EQ(ro.region().gpu_count.load(), 1u);
  EXPECT_THROW(ro.mutable_region(), RegionError);

  // Writes through one mapping are visible through another.
  auto rw = LimitsMapping::open(path, Access::kReadWrite);
  rw.mutable_region().gpus[0].weight.store(77);
  EXPECT_EQ(ro.region().gpus[0].weight.load(), 77u);
}

TEST(ShmRegionFile, ModesIgnoreUmask) {
  TempDir dir;
  const mode_t old = umask(077);
  auto l = LimitsMapping::create(dir / "limits", {"a"});
  auto u = UsageMapping::create(dir / "usage", {"a"});
  umask(old);
  struct stat sb {};
  ASSERT_EQ(stat((dir / "limits").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 07777, 0644u);
  ASSERT_EQ(stat((dir / "usage").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 07777, 0666u);
  EXPECT_EQ(std::filesystem::file_size(dir / "usage"), sizeof(UsageRegion));
}

TEST(ShmRegionFile, CreateIsExclusive) {
  TempDir dir;
  auto a = UsageMapping::create(dir / "usage", {"a"});
  auto e = catch_region_error([&] { UsageMapping::create(dir / "usage", {"a"}); });
  EXPECT_EQ(e.code(), RegionErrorCode::kExists);
  EXPECT_NE(std::string(e.what()).find((dir / "usage").string()), std::string::npos);
}

TEST(ShmRegionFile, CreateInMissingFolderAndFailingFillLeaveNoFile) {
  TempDir dir;
  auto e = catch_region_error([&] { UsageMapping::create(dir / "nope" / "usage", {"a"}); });
  EXPECT_EQ(e.code(), RegionErrorCode::kMissing);
  EXPECT_THROW(
      LimitsMapping::create(dir / "limits", {"a"},
                            [](LimitsRegion&) { throw std::runtime_error("fill failed"); }),
      std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(dir / "limits"));
}

TEST(ShmRegionFile, MissingFile) {
  TempDir dir;
  auto e = catch_region_error([&] { LimitsMapping::open(dir / "limits", Access::kReadOnly); });
  EXPECT_EQ(e.code(), RegionErrorCode::kMissing);
  EXPECT_NE(std::string(e.what()).find("limits"), std::string::npos);
}

struct Corruption {
  const char* name;
  std::function<void(const std::filesystem::path&)> damage;
  RegionErrorCode code;
  const char* message;
};

TEST(ShmRegionFile, CorruptRegionsAreRejectedWithClearErrors) {
  const std::uint64_t bad_magic = 0x1122334455667788ull;
  const std::uint32_t other_version = kLayoutVersion + 1;
  const std::uint32_t bad_header = 64;
  const std::uint64_t bad_total = sizeof(UsageRegion) - 8;
  const std::uint64_t zero = 0;
  const std::vector<Corruption> cases = {
      {"bad magic", [&](auto& p) { poke(p, 0, &bad_magic, 8); }, RegionErrorCode::kBadMagic,
       "bad magic 0x1122334455667788"},
      {"unpublished", [&](auto& p) { poke(p, 0, &zero, 8); }, RegionErrorCode::kBadMagic,
       "not initialised"},
      {"limits magic", [&](auto& p) { poke(p, 0, &kLimitsMagic, 8); }, RegionErrorCode::kBadMagic,
       "is a limits region"},
      {"other version", [&](auto& p) { poke(p, 8, &other_version, 4); },
       RegionErrorCode::kBadVersion, "layout version 2"},
      {"header size", [&](auto& p) { poke(p, 12, &bad_header, 4); }, RegionErrorCode::kBadSize,
       "header_size 64"},
      {"total size", [&](auto& p) { poke(p, 16, &bad_total, 8); }, RegionErrorCode::kBadSize,
       "total_size"},
      {"truncated", [&](auto& p) { std::filesystem::resize_file(p, sizeof(UsageRegion) - 1); },
       RegionErrorCode::kTruncated, "truncated"},
      {"shorter than header", [&](auto& p) { std::filesystem::resize_file(p, 100); },
       RegionErrorCode::kTruncated, "shorter than a region header"},
      {"zero-length", [&](auto& p) { std::filesystem::resize_file(p, 0); },
       RegionErrorCode::kTruncated, "zero-length"},
      {"too long", [&](auto& p) { std::filesystem::resize_file(p, sizeof(UsageRegion) + 4096); },
       RegionErrorCode::kBadSize, "expected"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    const auto path = dir / "usage";
    { UsageMapping::create(path, {"a"}); }
    c.damage(path);
    for (Access access : {Access::kReadOnly, Access::kReadWrite}) {
      auto e = catch_region_error([&] { UsageMapping::open(path, access); });
      EXPECT_EQ(e.code(), c.code) << c.name << ": " << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find(path.string()), std::string::npos) << c.name << ": " << what;
      EXPECT_NE(what.find(c.message), std::string::npos) << c.name << ": " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << c.name;
    }
  }
}

TEST(ShmRegionFile, NotARegularFile) {
  TempDir dir;
  std::filesystem::create_directory(dir / "usage");
  auto e = catch_region_error([&] { UsageMapping::open(dir / "usage", Access::kReadOnly); });
  EXPECT_EQ(e.code(), RegionErrorCode::kNotRegular);
}

// A tenant controls its folder: a symbolic link in place of a region file is
// never followed, whether it points at a valid region or not.
TEST(ShmRegionFile, SymbolicLinksAreNeverFollowed) {
  TempDir dir;
  { UsageMapping::create(dir / "other", {"b"}); }
  std::filesystem::create_symlink(dir / "other", dir / "usage");
  for (Access access : {Access::kReadOnly, Access::kReadWrite}) {
    auto e = catch_region_error([&] { UsageMapping::open(dir / "usage", access); });
    EXPECT_EQ(e.code(), RegionErrorCode::kNotRegular) << e.what();
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  auto e = catch_region_error([&] { UsageMapping::open_or_create(dir / "usage", {"a"}); });
  EXPECT_EQ(e.code(), RegionErrorCode::kNotRegular) << e.what();
  // A dangling link is not created through either.
  std::filesystem::create_symlink(dir / "nowhere", dir / "limits");
  auto c = catch_region_error([&] { LimitsMapping::create(dir / "limits", {"a"}); });
  EXPECT_EQ(c.code(), RegionErrorCode::kExists);
  EXPECT_FALSE(std::filesystem::exists(dir / "nowhere"));
}

// A FIFO in place of a region file is refused at once: opening it must not
// wait for a writer (that hung cusharectl).
TEST(ShmRegionFile, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "usage").c_str(), 0666), 0);
  const auto start = std::chrono::steady_clock::now();
  for (Access access : {Access::kReadOnly, Access::kReadWrite}) {
    auto e = catch_region_error([&] { UsageMapping::open(dir / "usage", access); });
    EXPECT_EQ(e.code(), RegionErrorCode::kNotRegular) << e.what();
    EXPECT_NE(std::string(e.what()).find("FIFO"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// A device node in place of a region file is refused without being opened:
// a device's open can act (a watchdog's arms a reboot), and a tenant's root
// may make one in its folder. The open of an unregistered device fails
// (ENXIO), so an attempt would show as an I/O error, not a refusal.
TEST(ShmRegionFile, ADeviceNodeIsRefusedWithoutBeingOpened) {
  TempDir dir;
  if (::mknod((dir / "usage").c_str(), S_IFCHR | 0666, makedev(4095, 0)) != 0)
    GTEST_SKIP() << "cannot make a device node here: " << std::strerror(errno);
  for (Access access : {Access::kReadOnly, Access::kReadWrite}) {
    auto e = catch_region_error([&] { UsageMapping::open(dir / "usage", access); });
    EXPECT_EQ(e.code(), RegionErrorCode::kNotRegular) << e.what();
    EXPECT_NE(std::string(e.what()).find("a device"), std::string::npos) << e.what();
  }
}

TEST(ShmRegionFile, StillAtTellsAReplacedFileApart) {
  TempDir dir;
  auto mapping = UsageMapping::create(dir / "usage", {"a"});
  EXPECT_TRUE(mapping.still_at(dir / "usage"));
  EXPECT_EQ(mapping.file().uid, ::getuid());
  std::filesystem::rename(dir / "usage", dir / "moved");
  { UsageMapping::create(dir / "usage", {"a"}); }
  EXPECT_FALSE(mapping.still_at(dir / "usage"));
  EXPECT_TRUE(mapping.still_at(dir / "moved"));
  std::filesystem::remove(dir / "usage");
  std::filesystem::create_symlink(dir / "moved", dir / "usage");
  EXPECT_FALSE(mapping.still_at(dir / "usage"));
}

TEST(ShmRegionFile, MappingsAreMovable) {
  TempDir dir;
  auto a = UsageMapping::create(dir / "usage", {"a"});
  UsageRegion* r = &a.mutable_region();
  UsageMapping b = std::move(a);
  EXPECT_EQ(&b.mutable_region(), r);
  b.mutable_region().gpus[0].used_bytes.store(5);
  auto c = UsageMapping::open(dir / "usage", Access::kReadOnly);
  c = std::move(b);
  EXPECT_EQ(c.region().gpus[0].used_bytes.load(), 5u);
}

TEST(ShmRegionFile, OpenOrCreateRaceHasExactlyOneCreator) {
  for (int round = 0; round < 5; ++round) {
    TempDir dir;
    const auto path = dir / "usage";
    struct Shared {
      std::atomic<int> go;
      std::atomic<int> created;
      std::atomic<int> opened;
    };
    test::SharedMem<Shared> sh;
    std::vector<pid_t> kids;
    kids.reserve(8);
    for (int i = 0; i < 8; ++i) {
      kids.push_back(test::fork_child([&] {
        while (sh->go.load() == 0) {
        }
        auto m = UsageMapping::open_or_create(path, {"race"},
                                              [](UsageRegion& r) { r.gpu_count.store(3); });
        if (m.region().gpu_count.load() != 3) return 2;  // saw the fill before the magic
        (m.created() ? sh->created : sh->opened).fetch_add(1);
        return 0;
      }));
    }
    sh->go.store(1);
    for (pid_t k : kids) EXPECT_EQ(test::wait_child(k), 0);
    EXPECT_EQ(sh->created.load(), 1);
    EXPECT_EQ(sh->opened.load(), 7);
  }
}

TEST(ShmRegionFile, OpenOrCreateWaitsForPublisherThenGivesUp) {
  TempDir dir;
  const auto path = dir / "usage";
  { UsageMapping::create(path, {"a"}); }
  const std::uint64_t zero = 0;
  poke(path, 0, &zero, 8);  // as if the creator had not published yet
  // A "creator" that publishes a little later: the opener must wait for it.
  const pid_t publisher = test::fork_child([&] {
    usleep(20000);
    poke(path, 0, &kUsageMagic, 8);
    return 0;
  });
  auto m = UsageMapping::open_or_create(path, {"a"}, {}, std::chrono::seconds(30));
  EXPECT_FALSE(m.created());
  EXPECT_EQ(test::wait_child(publisher), 0);

  // Never published: error after the bound, naming the file.
  poke(path, 0, &zero, 8);
  auto e = catch_region_error(
      [&] { UsageMapping::open_or_create(path, {"a"}, {}, std::chrono::milliseconds(20)); });
  EXPECT_EQ(e.code(), RegionErrorCode::kBadMagic);
  EXPECT_NE(std::string(e.what()).find("remove the file"), std::string::npos) << e.what();

  // A broken (not merely unpublished) file is an error at once.
  std::filesystem::resize_file(path, 100);
  poke(path, 0, &kUsageMagic, 8);
  e = catch_region_error([&] { UsageMapping::open_or_create(path, {"a"}); });
  EXPECT_EQ(e.code(), RegionErrorCode::kTruncated);
}

// A process that finds the file already there (the shim's open path) while
// its creator is still filling it waits for the magic instead of failing.
TEST(ShmRegionFile, OpenWithWaitSeesALatePublisher) {
  TempDir dir;
  const auto path = dir / "usage";
  { UsageMapping::create(path, {"a"}); }
  const std::uint64_t zero = 0;
  poke(path, 0, &zero, 8);
  auto e = catch_region_error([&] { UsageMapping::open(path, Access::kReadOnly); });
  EXPECT_EQ(e.code(), RegionErrorCode::kBadMagic);  // no wait: at once

  const pid_t publisher = test::fork_child([&] {
    usleep(20000);
    poke(path, 0, &kUsageMagic, 8);
    return 0;
  });
  auto m = UsageMapping::open(path, Access::kReadOnly, std::chrono::seconds(30));
  EXPECT_FALSE(m.created());
  EXPECT_EQ(test::wait_child(publisher), 0);

  poke(path, 0, &zero, 8);
  const auto t0 = std::chrono::steady_clock::now();
  e = catch_region_error(
      [&] { UsageMapping::open(path, Access::kReadOnly, std::chrono::milliseconds(30)); });
  EXPECT_EQ(e.code(), RegionErrorCode::kBadMagic);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
}

TEST(ShmRegionFile, ValidateHeaderPure) {
  HeaderFields ok{kLimitsMagic, kLayoutVersion, sizeof(RegionHeader), sizeof(LimitsRegion)};
  EXPECT_FALSE(validate_region_header(RegionKind::kLimits, ok, sizeof(LimitsRegion)));
  EXPECT_EQ(validate_region_header(RegionKind::kUsage, ok, sizeof(LimitsRegion))->code,
            RegionErrorCode::kBadMagic);
  EXPECT_EQ(validate_region_header(RegionKind::kLimits, ok, 0)->code, RegionErrorCode::kTruncated);
  EXPECT_EQ(validate_region_header(RegionKind::kLimits, ok, 127)->code,
            RegionErrorCode::kTruncated);
  auto v = ok;
  v.layout_version = 0;
  EXPECT_EQ(validate_region_header(RegionKind::kLimits, v, sizeof(LimitsRegion))->code,
            RegionErrorCode::kBadVersion);
}

}  // namespace
}  // namespace cushare::shm
