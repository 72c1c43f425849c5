#include "pig/spec/machine.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pig/spec/files.h"

namespace pig::spec {
namespace {

std::string_view Trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos)
    return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string ReadLine(const std::string &path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line))
    return {};
  return std::string(Trim(line));
}

std::uint64_t L3Bytes() {
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    const std::string level = ReadLine(dir + "/level");
    if (level.empty()) {
      if (i >= 4) // the indices are contiguous; a few are always present where any is
        break;
      continue;
    }
    if (level == "3")
      return ParseCacheSize(ReadLine(dir + "/size"));
  }
  return 0;
}

template <typename T> bool ParseNumber(std::string_view s, T &out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

} // namespace

std::string MachineFingerprint::str() const {
  std::string s = cpu;
  s.append(", ").append(target).append(", ").append(std::to_string(cores)).append(" cores, ");
  s.append(std::to_string(threads)).append(" threads, L3 ");
  s.append(std::to_string(l3_bytes >> 20)).append(" MiB");
  return s;
}

std::string MachineFingerprint::hardware_str() const {
  return cpu + ", " + std::to_string(cores) + " cores, L3 " + std::to_string(l3_bytes >> 20) +
         " MiB";
}

std::string CpuModelFromCpuinfo(std::string_view cpuinfo) {
  std::string implementer, part;
  std::size_t pos = 0;
  while (pos < cpuinfo.size()) {
    auto nl = cpuinfo.find('\n', pos);
    if (nl == std::string_view::npos)
      nl = cpuinfo.size();
    const std::string_view line = cpuinfo.substr(pos, nl - pos);
    pos = nl + 1;
    const auto colon = line.find(':');
    if (colon == std::string_view::npos)
      continue;
    const std::string_view key = Trim(line.substr(0, colon)), value = Trim(line.substr(colon + 1));
    if (key == "model name" && !value.empty())
      return std::string(value);
    if (key == "CPU implementer" && implementer.empty())
      implementer = value;
    if (key == "CPU part" && part.empty())
      part = value;
  }
  if (!implementer.empty())
    return "implementer " + implementer + " part " + part;
  return {};
}

int CountCpuList(std::string_view list) {
  int n = 0;
  std::size_t pos = 0;
  list = Trim(list);
  while (pos < list.size()) {
    auto comma = list.find(',', pos);
    if (comma == std::string_view::npos)
      comma = list.size();
    const std::string_view range = list.substr(pos, comma - pos);
    const auto dash = range.find('-');
    int a = 0, b = 0;
    if (dash != std::string_view::npos && ParseNumber(range.substr(0, dash), a) &&
        ParseNumber(range.substr(dash + 1), b) && b >= a)
      n += b - a + 1;
    else if (ParseNumber(range, a))
      n += 1;
    pos = comma + 1;
  }
  return n;
}

std::uint64_t ParseCacheSize(std::string_view s) {
  s = Trim(s);
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data())
    return 0;
  switch (p == s.data() + s.size() ? '\0' : *p) {
  case 'K':
    return v << 10;
  case 'M':
    return v << 20;
  case 'G':
    return v << 30;
  default:
    return v;
  }
}

MachineFingerprint DetectMachine(const std::string &target, int threads) {
  MachineFingerprint f;
  std::string cpuinfo; // none (not Linux): the model stays unknown
  try {
    cpuinfo = ReadFile("/proc/cpuinfo");
  } catch (const std::runtime_error &) {
  }
  f.cpu = CpuModelFromCpuinfo(cpuinfo);
  if (f.cpu.empty())
    f.cpu = "unknown";
  f.target = target;
  f.threads = threads;
  f.cores = int(std::thread::hardware_concurrency());
  if (f.cores <= 0)
    f.cores = CountCpuList(ReadLine("/sys/devices/system/cpu/online"));
  if (f.cores <= 0)
    f.cores = 1; // we are running on one, at least
  f.l3_bytes = L3Bytes();
  return f;
}

std::string FormatMachine(const MachineFingerprint &m) {
  return m.cpu + "|" + m.target + "|" + std::to_string(m.cores) + "|" + std::to_string(m.threads) +
         "|" + std::to_string(m.l3_bytes);
}

std::optional<MachineFingerprint> ParseMachine(std::string_view text, std::string *error) {
  std::vector<std::string_view> f;
  for (std::size_t pos = 0;;) {
    const auto bar = text.find('|', pos);
    f.push_back(
        text.substr(pos, bar == std::string_view::npos ? std::string_view::npos : bar - pos));
    if (bar == std::string_view::npos)
      break;
    pos = bar + 1;
  }
  auto fail = [&](const std::string &why) -> std::optional<MachineFingerprint> {
    if (error)
      *error = "machine '" + std::string(text) + "': " + why +
               " (expected cpu|target|cores|threads|l3_bytes)";
    return std::nullopt;
  };
  if (f.size() != 5)
    return fail(std::to_string(f.size()) + " fields");
  MachineFingerprint m;
  m.cpu = f[0];
  m.target = f[1];
  if (!ParseNumber(f[2], m.cores) || m.cores < 0)
    return fail("cores '" + std::string(f[2]) + "' is not a count");
  if (!ParseNumber(f[3], m.threads) || m.threads < 0)
    return fail("threads '" + std::string(f[3]) + "' is not a count");
  if (!ParseNumber(f[4], m.l3_bytes))
    return fail("l3_bytes '" + std::string(f[4]) + "' is not a byte count");
  return m;
}

} // namespace pig::spec
