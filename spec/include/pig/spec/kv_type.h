// The element types of K and V rows: their names (kernel keys, manifests, --kv, the dialect's
// element-type names), the bytes of a row, the q8 block, and which head dims each supports.
//
// q8 (docs/KV8.md; pig/reference/kv_quant.h quantises and dequantises): a row of d elements is
// d / 32 blocks of 34 bytes, each a bf16 scale (raw bits, little-endian) followed by 32 int8.
// f32 and bf16 (raw bits, round to nearest even) rows are d elements back to back.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "pig/spec/text.h"

namespace pig::spec {

/// Element type of K and V rows.
enum class DType : std::uint8_t { f32, bf16, q8 };

inline constexpr std::size_t kQ8Block = 32;      ///< q8: elements per block
inline constexpr std::size_t kQ8BlockBytes = 34; ///< q8: bf16 scale + 32 int8

struct DTypeInfo {
  DType type;
  const char *name; ///< as kernel keys, manifests and --kv spell it
};

/// Every element type, in enum order. (codegen/PigKernels.cmake reads the names from the lines
/// below: keep one entry per line, in this form.)
inline constexpr std::array<DTypeInfo, 3> kDTypes = {{
    {DType::f32, "f32"},
    {DType::bf16, "bf16"},
    {DType::q8, "q8"},
}};

/// "f32", "bf16" or "q8".
constexpr const char *name(DType t) {
  for (const DTypeInfo &i : kDTypes)
    if (i.type == t)
      return i.name;
  return "?";
}

/// The element type named `text` (exactly, case-sensitive), or nullopt.
constexpr std::optional<DType> parse_dtype(std::string_view text) {
  for (const DTypeInfo &i : kDTypes)
    if (text == i.name)
      return i.type;
  return std::nullopt;
}

/// "f32, bf16, q8": the names joined by `sep`, the last two by `last` when given
/// (dtype_names(", ", " or ") is "f32, bf16 or q8", dtype_names("|") "f32|bf16|q8").
inline std::string dtype_names(std::string_view sep = ", ", std::string_view last = {}) {
  std::string s;
  for (std::size_t i = 0; i < kDTypes.size(); ++i) {
    if (i)
      s.append(i + 1 == kDTypes.size() && !last.empty() ? last : sep);
    s.append(kDTypes[i].name);
  }
  return s;
}

/// Bytes of a q8 row of d elements (d a multiple of kQ8Block).
constexpr std::size_t q8_row_bytes(std::size_t d) { return d / kQ8Block * kQ8BlockBytes; }

/// Bytes of one row of d elements of type t.
constexpr std::size_t row_bytes(DType t, std::size_t d) {
  return t == DType::f32 ? 4 * d : t == DType::bf16 ? 2 * d : q8_row_bytes(d);
}

/// The head dims rows of type t support: d >= 2 and a multiple of this (2 for every type: the
/// kernels and the dialect process element pairs; kQ8Block for q8: whole blocks).
constexpr std::size_t head_dim_multiple(DType t) { return t == DType::q8 ? kQ8Block : 2; }

/// True when rows of d elements of type t can be stored, hashed and attended.
constexpr bool supports_head_dim(DType t, long long d) {
  return d >= 2 && d % static_cast<long long>(head_dim_multiple(t)) == 0;
}

/// Empty when rows of d elements of type t can be stored and attended; else why not ("head dim
/// 7 is not even", "q8 rows need a head dim that is a multiple of 32 (blocks of 32), not 80").
inline std::string dtype_unsupported(DType t, std::size_t d) {
  if (d == 0 || d % 2 != 0)
    return cat("head dim ", std::to_string(d), " is not even");
  if (!supports_head_dim(t, static_cast<long long>(d)))
    return cat("q8 rows need a head dim that is a multiple of ", std::to_string(kQ8Block),
               " (blocks of ", std::to_string(kQ8Block), "), not ", std::to_string(d));
  return "";
}

} // namespace pig::spec
