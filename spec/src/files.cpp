#include "pig/spec/files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace pig::spec {

std::string ReadFile(const std::string &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error("cannot read " + path);
  std::string out;
  char buf[1 << 16];
  for (;;) { // read(2), not a stream: a directory or an I/O error is an error, not an empty file
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ::close(fd);
      if (n < 0)
        throw std::runtime_error("cannot read " + path);
      return out;
    }
    out.append(buf, std::size_t(n));
  }
}

void WriteFileAtomically(const std::string &path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) // nothing was created: whatever holds the name (a directory) is not ours to remove
    throw std::runtime_error("cannot create " + tmp);
  const char *p = text.data();
  std::size_t left = text.size();
  bool ok = true;
  while (ok && left > 0) { // a short write (a full disk) is continued or fails
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR)
      continue;
    ok = w > 0;
    if (ok) {
      p += w;
      left -= std::size_t(w);
    }
  }
  ok = ok && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path);
  }
}

void MakeDirs(const std::string &path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec)
    throw std::runtime_error("cannot create directory " + path + ": " + ec.message());
}

} // namespace pig::spec
