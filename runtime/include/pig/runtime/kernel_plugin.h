// kernel_plugin.h: a deployment's kernels as a library of their own. tools/pig-kernel-tree turns a
// manifest into a source tree (the generated kernel TUs, the Highway building blocks they include,
// pig_kernel_plugin.cpp and a CMakeLists.txt) that builds, without MLIR, into a shared object;
// LoadKernelPlugin loads that object into this process and registers its configurations in
// KernelRegistry::global(), as a static link of the generated kernels would.
//
// The object and the loading process must be built from the same pig headers: the entry point
// compares kKernelPluginAbi and the sizes of LshKernelSet and KernelKey and serves nothing when
// they differ (LoadKernelPlugin then throws, naming the object).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pig/runtime/lsh_kernels.h"

namespace pig::runtime::lsh {

/// Raised when LshKernelSet, KernelKey or this interface change incompatibly.
inline constexpr int kKernelPluginAbi = 1;

/// One configuration of a kernel library: its key and the factory of its kernel set.
struct KernelPluginEntry {
  KernelKey key;
  LshKernelSet (*factory)();
};

/// Whether an object built with these headers serves a process that passes (abi, set_bytes,
/// key_bytes) to its entry point.
inline bool KernelPluginCompatible(int abi, std::size_t set_bytes, std::size_t key_bytes) {
  return abi == kKernelPluginAbi && set_bytes == sizeof(LshKernelSet) &&
         key_bytes == sizeof(KernelKey);
}

/// The entry point's type (its name: "pig_kernel_plugin"): the entries, *count of them, or null
/// (and *count 0) when the caller's headers differ.
using KernelPluginFn = const KernelPluginEntry *(*)(int abi, std::size_t set_bytes,
                                                    std::size_t key_bytes, std::size_t *count);

/// Loads the kernel library at `path` (dlopen, kept loaded for the process's life) and registers
/// its configurations in KernelRegistry::global(); returns their keys. Loading the same path again
/// registers nothing new. Throws std::runtime_error naming the path: dlopen's message, no
/// pig_kernel_plugin symbol, or an object built from other headers.
std::vector<KernelKey> LoadKernelPlugin(const std::string &path);

/// The configurations every LoadKernelPlugin of this process registered, in load order.
std::vector<KernelKey> LoadedKernelPluginKeys();

} // namespace pig::runtime::lsh
