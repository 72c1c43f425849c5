// A kernel configuration, its one spelling "K=10 L=150 d=64 bf16", and the manifest line
// (configs/kernels.txt, docs/ADDING.md) "K=10 L=150 d=64 bf16 [knob=value ...]".
//
// The runtime's registry key (pig/runtime/lsh_kernels.h) adds the target and prints itself as
// this spelling followed by the target; pig-specialize and pig-schedule (the key of a function,
// tuning records' "kernel"), pig-translate and pig-tune's records all use str() and parse().
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "pig/spec/kv_type.h"
#include "pig/spec/lsh_params.h"
#include "pig/spec/schedule.h"

namespace pig::spec {

/// (K, L) in the LshHash base (no t: pig/spec/lsh_params.h says why); {K, L, d, dtype} initialises.
struct KernelKey : LshHash {
  int d = 128; ///< head dim (supports_head_dim)
  DType dtype = DType::bf16;
  Schedule schedule{}; ///< how the kernels run, not what they compute

  friend bool operator==(const KernelKey &, const KernelKey &) = default;

  /// "K=10 L=150 d=64 bf16": the configuration, without the schedule.
  std::string str() const;
  /// "K=10 L=150 d=64 bf16 gqa=per_head block=64 prefetch=8 ...": with every knob (a manifest
  /// line parse_manifest_line reads back).
  std::string str_with_schedule() const;
  /// "k10_l150_d64_bf16": the configuration in generated names.
  std::string symbol() const;
  /// "" when some kernel can serve the key, else the first reason it cannot (K or L outside
  /// their limits, a head dim the element type does not support, an illegal schedule).
  std::string validate() const;

  /// Reads str()'s spelling: the words "K=<n> L=<n> d=<n> <type>" in this order, separated by
  /// any whitespace. Returns nullopt and sets *error (when given) to a message naming what is
  /// wrong (limits are validate()'s, not checked here); the schedule is the default.
  static std::optional<KernelKey> parse(std::string_view text, std::string *error = nullptr);
};

/// One line of a kernel manifest.
struct ManifestLine {
  bool blank = true;      ///< only whitespace and a comment: no configuration
  KernelKey key;          ///< the configuration; its schedule is the line's knobs over the defaults
  bool has_knobs = false; ///< the line names knobs (else pig-schedule chooses the schedule)
};

/// Why a manifest line was refused. `about_word`: the message names one word that cannot be read
/// ("cannot read 'x' (expected ...)"); else it is about the line as a whole (an element type
/// without kernels, an unknown or illegal knob), and callers quote the line with it.
struct ManifestError {
  std::string message;
  bool about_word = false;
};

/// Reads "K=10 L=150 d=64 bf16" followed by optional schedule knobs "gqa=union block=32"
/// (pig/spec/schedule.h); `#` starts a comment. The first four words are KernelKey::parse's, in
/// its order. Returns nullopt and fills *error (when given) on anything else.
std::optional<ManifestLine> parse_manifest_line(std::string_view text,
                                                ManifestError *error = nullptr);

} // namespace pig::spec
