// The hash transform's spelling (docs/HASHING.md): which map pig fits to the keys before
// hashing, as "plain", "pca:r=16", "whiten:a=0.5", "mips:q=1" or "whiten:a=0.25+mips:q=0.9".
// Parsing, printing and validation live here (the dialect's #pig.lsh, the runtime's
// AttentionSpec and every tool's --lsh read them); fitting the maps to keys is the reference's
// (pig/reference/transform.h, which explains the three families).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pig::spec {

struct TransformSpec {
  enum class Linear { none, pca, whiten };
  Linear linear = Linear::none;
  std::size_t rank = 0; ///< pca: principal directions kept, [1, d]
  double alpha = 0.5;   ///< whiten: exponent, (0, 1]
  double mips = 0;      ///< augmentation quantile of the key norms, (0, 1]; 0 = none

  bool identity() const { return linear == Linear::none && mips == 0; }
  /// Rows W needs for keys of dimension d: rank or d, plus 1 with the augmentation.
  std::size_t hashed_dim(std::size_t d) const;
  /// Throws std::invalid_argument naming the parameter, its range and the value given.
  void validate(std::size_t d) const;
  /// "plain", "pca:r=16", "whiten:a=0.5", "mips:q=1", "whiten:a=0.25+mips:q=0.9".
  std::string str() const;
  /// Inverse of str(). Throws std::invalid_argument with the accepted forms on anything else.
  static TransformSpec parse(std::string_view text);

  friend bool operator==(const TransformSpec &, const TransformSpec &) = default;
};

} // namespace pig::spec
