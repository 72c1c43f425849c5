#include "pig/eval/kv_formats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "pig/reference/kv_quant.h"

namespace pig::eval {
namespace {

float RoundBf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u = ((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// Quantise the elements x[i * stride], i < m, with one scale (q8's rule, ref::q8_scale_for).
void QuantGroup(float *x, std::size_t m, std::size_t stride) {
  float amax = 0;
  for (std::size_t i = 0; i < m; ++i)
    amax = std::max(amax, std::fabs(x[i * stride]));
  const float s = ref::q8_scale_for(amax);
  for (std::size_t i = 0; i < m; ++i) {
    float &v = x[i * stride];
    v = s > 0 ? std::clamp(std::nearbyint(v / s), -127.0f, 127.0f) * s : 0.0f;
  }
}

} // namespace

const char *to_string(KvFormat f) {
  switch (f) {
  case KvFormat::bf16:
    return "bf16";
  case KvFormat::q8:
    return "q8 (scale per 32 elements of a row)";
  case KvFormat::q8_row:
    return "int8, scale per row";
  case KvFormat::q8_channel:
    return "int8 keys per channel and 32 tokens, values q8";
  }
  return "?";
}

double BytesPerElement(KvFormat f, std::size_t d) {
  switch (f) {
  case KvFormat::bf16:
    return 2;
  case KvFormat::q8:
    return double(ref::q8_row_bytes(d)) / double(d);
  case KvFormat::q8_row:
    return (double(d) + 2) / double(d);
  case KvFormat::q8_channel: // keys: 2 bytes per channel per 32 tokens; values: q8
    return 0.5 * (1 + 2.0 / 32) + 0.5 * double(ref::q8_row_bytes(d)) / double(d);
  }
  return 0;
}

std::vector<KvFormat> AllKvFormats() {
  return {KvFormat::bf16, KvFormat::q8, KvFormat::q8_row, KvFormat::q8_channel};
}

void SimulateKvFormat(KvFormat f, bool keys, ref::OwnedMatrix &rows) {
  const std::size_t n = rows.rows, d = rows.cols;
  if (f == KvFormat::bf16) {
    for (float &x : rows.data)
      x = RoundBf16(x);
    return;
  }
  if (f == KvFormat::q8 || (f == KvFormat::q8_channel && !keys)) {
    if (d % ref::kQ8Block)
      throw std::invalid_argument("q8 needs a head dim that is a multiple of 32");
    std::vector<std::uint8_t> buf(ref::q8_row_bytes(d));
    for (std::size_t i = 0; i < n; ++i) {
      ref::quantize_q8(rows.row(i), d, buf.data());
      ref::dequantize_q8(buf.data(), d, rows.row(i));
    }
    return;
  }
  if (f == KvFormat::q8_row) {
    for (std::size_t i = 0; i < n; ++i)
      QuantGroup(rows.row(i), d, 1);
    return;
  }
  for (std::size_t g = 0; g < n; g += 32) // q8_channel keys
    for (std::size_t c = 0; c < d; ++c)
      QuantGroup(rows.row(g) + c, std::min<std::size_t>(32, n - g), d);
}

std::vector<KvFormatError> MeasureKvFormat(KvFormat f,
                                           const std::vector<std::vector<float>> &queries,
                                           const ref::OwnedMatrix &K, const ref::OwnedMatrix &V) {
  ref::OwnedMatrix Kf = K, Vf = V;
  SimulateKvFormat(f, true, Kf);
  SimulateKvFormat(f, false, Vf);
  std::vector<KvFormatError> out;
  for (const std::vector<float> &q : queries) {
    const ref::Attention exact = ref::dense_attention(q, K, V);
    const ref::Attention got = ref::dense_attention(q, Kf, Vf);
    double num = 0, den = 0;
    for (std::size_t j = 0; j < exact.out.size(); ++j) {
      const double e = double(got.out[j]) - double(exact.out[j]);
      num += e * e;
      den += double(exact.out[j]) * double(exact.out[j]);
    }
    const std::vector<double> z = ref::logits(q, K), zf = ref::logits(q, Kf);
    KvFormatError e;
    e.out_rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    double ss = 0;
    for (std::size_t i = 0; i < z.size(); ++i) {
      const double dz = std::fabs(zf[i] - z[i]);
      e.logit_max = std::max(e.logit_max, dz);
      ss += dz * dz;
    }
    e.logit_rms = z.empty() ? 0 : std::sqrt(ss / double(z.size()));
    out.push_back(e);
  }
  return out;
}

} // namespace pig::eval
