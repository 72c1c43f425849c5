// pig/spec/files.h: the one reader and the one atomic writer every layer uses.
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "pig/spec/files.h"

namespace {

namespace fs = std::filesystem;
using pig::spec::MakeDirs;
using pig::spec::ReadFile;
using pig::spec::WriteFileAtomically;

// Per test: ctest runs the cases of this file as separate processes, in parallel.
fs::path Dir() {
  const auto *t = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path d = fs::path(::testing::TempDir()) / (std::string("pig_files_test_") + t->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string Message(const std::function<void()> &f) {
  try {
    f();
  } catch (const std::runtime_error &e) {
    return e.what();
  }
  return "no exception";
}

TEST(Files, ReadFileReadsAllBytesOrThrowsNamingTheFile) {
  const std::string path = (Dir() / "bytes").string();
  std::ofstream(path, std::ios::binary) << std::string("x\0y\n", 4);
  EXPECT_EQ(ReadFile(path), std::string("x\0y\n", 4));
  EXPECT_EQ(Message([] { ReadFile("/nonexistent/file"); }), "cannot read /nonexistent/file");
  EXPECT_EQ(Message([&] { ReadFile(Dir().string()); }), "cannot read " + Dir().string());
}

TEST(Files, WriteFileAtomicallyReplacesTheWholeFile) {
  const fs::path d = Dir();
  const std::string path = (d / "out.txt").string();
  WriteFileAtomically(path, "first, longer text\n");
  WriteFileAtomically(path, std::string("2\0", 2));
  EXPECT_EQ(ReadFile(path), std::string("2\0", 2));
  WriteFileAtomically(path, "");
  EXPECT_EQ(ReadFile(path), "");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Files, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  const fs::path d = Dir();
  const std::string path = (d / "kept.txt").string();
  WriteFileAtomically(path, "old");
  if (fs::exists("/dev/full")) { // the write fails (ENOSPC) after the temporary was opened
    fs::create_symlink("/dev/full", path + ".tmp");
    EXPECT_EQ(Message([&] { WriteFileAtomically(path, "new"); }), "cannot write " + path + ".tmp");
    EXPECT_EQ(ReadFile(path), "old");
    EXPECT_FALSE(fs::exists(fs::symlink_status(path + ".tmp")));
  }
  // The temporary cannot be created: a directory holds its name (not ours: it stays).
  fs::create_directories(path + ".tmp");
  EXPECT_EQ(Message([&] { WriteFileAtomically(path, "new"); }), "cannot create " + path + ".tmp");
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_TRUE(fs::is_directory(path + ".tmp"));
  // The rename fails: a non-empty directory holds the target's name.
  const std::string as_dir = (d / "is-a-dir").string();
  fs::create_directories(as_dir + "/inside");
  EXPECT_EQ(Message([&] { WriteFileAtomically(as_dir, "x"); }),
            "cannot rename " + as_dir + ".tmp to " + as_dir);
  EXPECT_TRUE(fs::is_directory(as_dir + "/inside"));
  EXPECT_FALSE(fs::exists(as_dir + ".tmp"));
}

TEST(Files, MakeDirsMakesParentsAndNamesWhatItCannotMake) {
  const fs::path d = Dir();
  MakeDirs((d / "a/b/c").string());
  MakeDirs((d / "a/b/c").string()); // exists: no error
  EXPECT_TRUE(fs::is_directory(d / "a/b/c"));
  std::ofstream((d / "file").string()) << "x";
  const std::string m = Message([&] { MakeDirs((d / "file/sub").string()); });
  EXPECT_EQ(m.rfind("cannot create directory " + (d / "file/sub").string() + ": ", 0), 0u) << m;
}

} // namespace
