// find_object must answer what glibc's _dl_find_object (2.35+) answers, since
// the unwinder linked into the portable libraries relies on it for every
// frame of every exception they throw.
#include "portable/find_object.hpp"

#include <gtest/gtest.h>
#include <link.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace {

void expect_same_as_glibc(void* pc, const char* what) {
  dl_find_object ours{}, real{};
  const int real_rc = _dl_find_object(pc, &real);
  const int our_rc = cushare::portable::find_object(pc, &ours);
  ASSERT_EQ(our_rc, real_rc) << what;
  if (real_rc != 0) return;
  EXPECT_EQ(ours.dlfo_eh_frame, real.dlfo_eh_frame) << what;
  EXPECT_EQ(ours.dlfo_link_map, real.dlfo_link_map) << what;
  EXPECT_EQ(ours.dlfo_map_start, real.dlfo_map_start) << what;
  EXPECT_EQ(ours.dlfo_map_end, real.dlfo_map_end) << what;
}

int local_function(int x) {
  return x + 1;
}

}  // namespace

TEST(FindObject, MatchesGlibcForCodeInEachKindOfObject) {
  expect_same_as_glibc(reinterpret_cast<void*>(&local_function), "the executable");
  expect_same_as_glibc(reinterpret_cast<void*>(&std::printf), "libc");
  expect_same_as_glibc(reinterpret_cast<void*>(&dl_iterate_phdr), "libc (loader API)");
  // A function of the shared C++ runtime: std::string's out-of-line members.
  void* (*cxx)(std::size_t) = &operator new;
  expect_same_as_glibc(reinterpret_cast<void*>(cxx), "libstdc++");
}

TEST(FindObject, AddressesOutsideEveryObjectAreNotFound) {
  int on_stack = 0;
  dl_find_object out{};
  EXPECT_EQ(cushare::portable::find_object(&on_stack, &out), -1);
  EXPECT_EQ(cushare::portable::find_object(nullptr, &out), -1);
  expect_same_as_glibc(&on_stack, "the stack");
}

TEST(FindObject, TheEhFrameItReportsIsTheObjectsEhFrameHeader) {
  dl_find_object out{};
  ASSERT_EQ(cushare::portable::find_object(reinterpret_cast<void*>(&local_function), &out), 0);
  ASSERT_NE(out.dlfo_eh_frame, nullptr);
  // .eh_frame_hdr starts with version 1.
  EXPECT_EQ(*static_cast<const unsigned char*>(out.dlfo_eh_frame), 1);
  EXPECT_LE(out.dlfo_map_start, reinterpret_cast<void*>(&local_function));
  EXPECT_GT(out.dlfo_map_end, reinterpret_cast<void*>(&local_function));
}
