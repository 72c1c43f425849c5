// The one machine fingerprint: what a speed measurement depends on beyond the configuration.
// pig-tune writes it into every speed record, pig-tune select applies a speed record only on its
// own fingerprint, and pig-schedule (at build time) applies a record measured on the same
// hardware. The standard library only: detection reads /proc/cpuinfo and sysfs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pig::spec {

struct MachineFingerprint {
  std::string cpu;            ///< /proc/cpuinfo model name (ARM: "implementer <i> part <p>")
  std::string target;         ///< Highway target the kernels dispatched to
  int cores = 0;              ///< online CPUs
  int threads = 0;            ///< threads the measurement used
  std::uint64_t l3_bytes = 0; ///< cpu0's level-3 cache, 0 when unknown
  friend bool operator==(const MachineFingerprint &, const MachineFingerprint &) = default;

  /// "Intel(R) Xeon(R) Processor, AVX3_DL, 2 cores, 2 threads, L3 260 MiB" (for people).
  std::string str() const;
  /// "Intel(R) Xeon(R) Processor, 2 cores, L3 260 MiB": the part same_hardware() compares.
  std::string hardware_str() const;
  /// The hardware alone: cpu, cores and L3. What a build-time choice (pig-schedule) can compare,
  /// knowing neither the target the kernels will dispatch to nor the threads they will run on.
  bool same_hardware(const MachineFingerprint &o) const {
    return cpu == o.cpu && cores == o.cores && l3_bytes == o.l3_bytes;
  }
};

/// This machine: cpu (CpuModelFromCpuinfo of /proc/cpuinfo, "unknown" when it names none),
/// cores (std::thread::hardware_concurrency, else sysfs cpu/online, at least 1), L3 (sysfs
/// cpu0's level-3 cache). `target` and `threads` come from the caller (a build-time caller has
/// neither: "" and 0). Depends on the hardware alone, never on the time or the load.
MachineFingerprint DetectMachine(const std::string &target = "", int threads = 0);

/// The parts of detection that read text, exposed for tests. x86 names the model ("model
/// name"); most ARM kernels do not, but give the implementer and part numbers, which tell the
/// cores apart just as well. "" when neither is there.
std::string CpuModelFromCpuinfo(std::string_view cpuinfo);
/// "0-1,4,6-7" (sysfs cpu/online): the number of CPUs listed.
int CountCpuList(std::string_view list);
/// sysfs cache sizes: "266240K" (the kernel writes K; M and G accepted in case); 0 if no number.
std::uint64_t ParseCacheSize(std::string_view size);

/// The one spelling of a fingerprint on a command line: "cpu|target|cores|threads|l3_bytes"
/// (pig-tune's --as-machine, pig-schedule's machine=). Parse gives nullopt and a message on
/// anything else (not five fields, a malformed or negative number).
std::string FormatMachine(const MachineFingerprint &m);
std::optional<MachineFingerprint> ParseMachine(std::string_view text, std::string *error);

} // namespace pig::spec
