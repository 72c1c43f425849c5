// pig.h, through libpig.so as a C engine links it, against pig::ref: the index's samples and
// MagicPIG's output are the reference's (contiguous, strided and paged rows, f32 and bf16, built
// at once or extended), dense attention is exact; and every function's error returns: NULL
// handles and pointers, unknown and mismatched dtypes, rows out of range, too-short block tables,
// impossible configurations, small output buffers, with a message per thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pig.h"
#include "pig/reference/reference.h"

namespace {

namespace ref = pig::ref;

std::uint16_t ToBf16(float x) { // round to nearest even, as pig's bf16 rows
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return std::uint16_t(u >> 16);
}
float FromBf16(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// n rows of d: keys in a cone (an offset plus noise, like a model's), values, a group's queries.
struct Data {
  size_t n, d, G;
  std::vector<float> k, v, q;
  Data(size_t n_, size_t d_, size_t G_, unsigned seed = 3) : n(n_), d(d_), G(G_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> offset(d);
    for (float &x : offset)
      x = 1.5f * nd(rng);
    k.resize(n * d);
    v.resize(n * d);
    q.resize(G * d);
    for (size_t i = 0; i < n * d; ++i) {
      k[i] = offset[i % d] + nd(rng);
      v[i] = nd(rng);
    }
    for (float &x : q)
      x = 0.5f * nd(rng);
  }
};

pig_rows Rows(const void *data, pig_dtype t, size_t d, size_t n) {
  pig_rows r{};
  r.data = data;
  r.dtype = t;
  r.d = d;
  r.n = n;
  return r;
}

pig_lsh_config Config(size_t mean_window = 0) {
  pig_lsh_config c;
  EXPECT_EQ(pig_lsh_config_default(&c), PIG_OK);
  c.mean_window = mean_window;
  return c;
}

// pig::ref's MagicPIG for head h of the group over the first n rows (keys as given: bf16-rounded
// where the index was built from bf16).
ref::MagicPigResult Reference(const std::vector<float> &k, const std::vector<float> &v,
                              const float *q, size_t n, size_t d, const pig_lsh_config &c) {
  const ref::OwnedMatrix W = ref::simhash_matrix(c.seed, d, c.K, c.L);
  return ref::magicpig_attention({q, d}, ref::Matrix{k.data(), n, d}, ref::Matrix{v.data(), n, d},
                                 W.view(), ref::LshConfig{c.K, c.L, c.t, c.seed},
                                 ref::StaticConfig{c.sink, c.local, c.mean_window});
}

void ExpectMatchesReference(pig_index *ix, const Data &x, const std::vector<float> &kref,
                            const std::vector<float> &vref, const pig_rows &keys,
                            const pig_rows &values, const pig_lsh_config &c, const char *what) {
  std::vector<float> out(x.G * x.d), lse(x.G);
  ASSERT_EQ(pig_attend_sampled(ix, x.q.data(), x.G, 0.0f, &keys, &values, out.data(), lse.data()),
            PIG_OK)
      << pig_last_error();
  std::vector<uint32_t> tokens(x.n);
  std::vector<uint8_t> masks(x.n);
  size_t count = 0;
  ASSERT_EQ(
      pig_index_retrieve(ix, x.q.data(), x.G, tokens.data(), masks.data(), tokens.size(), &count),
      PIG_OK)
      << pig_last_error();
  std::set<uint32_t> want_union;
  for (size_t h = 0; h < x.G; ++h) {
    const ref::MagicPigResult r = Reference(kref, vref, &x.q[h * x.d], keys.n, x.d, c);
    for (size_t j = 0; j < x.d; ++j)
      ASSERT_NEAR(out[h * x.d + j], r.attention.out[j], 2e-4 * (1 + std::abs(r.attention.out[j])))
          << what << " head " << h << " dim " << j;
    EXPECT_NEAR(lse[h], r.attention.lse, 2e-4 * (1 + std::abs(r.attention.lse))) << what;
    std::set<uint32_t> mine;
    for (size_t i = 0; i < count; ++i)
      if (masks[i] >> h & 1)
        mine.insert(tokens[i]);
    const std::set<uint32_t> want(r.sample.begin(), r.sample.end());
    EXPECT_EQ(mine, want) << what << " head " << h;
    want_union.insert(want.begin(), want.end());
  }
  EXPECT_EQ(std::set<uint32_t>(tokens.begin(), tokens.begin() + std::ptrdiff_t(count)), want_union)
      << what;
  EXPECT_TRUE(std::is_sorted(tokens.begin(), tokens.begin() + std::ptrdiff_t(count))) << what;
  EXPECT_GT(count, 0u) << what;
}

TEST(CApi, SampledAttentionAndRetrievalAreTheReferences) {
  const Data x(1500, 64, 3);
  const pig_lsh_config c = Config();
  const pig_rows keys = Rows(x.k.data(), PIG_F32, x.d, x.n),
                 values = Rows(x.v.data(), PIG_F32, x.d, x.n);
  pig_index *ix = nullptr;
  ASSERT_EQ(pig_index_build(&c, &keys, 0, &ix), PIG_OK) << pig_last_error();
  EXPECT_STREQ(pig_last_error(), "");
  ExpectMatchesReference(ix, x, x.k, x.v, keys, values, c, "contiguous f32");
  pig_index_info info;
  ASSERT_EQ(pig_index_info_get(ix, &info), PIG_OK);
  EXPECT_EQ(info.n, x.n);
  EXPECT_EQ(info.indexed, x.n - c.sink - c.local);
  EXPECT_EQ(info.capacity, x.n);
  EXPECT_GT(info.bytes, 0u);
  pig_index_free(ix);
}

// Built over a prefix, then extended token by token and in a chunk: with the mean fixed by its
// window, the index is the reference's over all the rows.
TEST(CApi, ExtendedIndexIsTheReferencesOverAllRows) {
  const Data x(1400, 64, 2, 5);
  const pig_lsh_config c = Config(256);
  pig_rows keys = Rows(x.k.data(), PIG_F32, x.d, 1000);
  pig_index *ix = nullptr;
  ASSERT_EQ(pig_index_build(&c, &keys, x.n, &ix), PIG_OK) << pig_last_error();
  for (size_t n : {1001, 1002, 1003, 1200, 1400}) {
    keys.n = n;
    ASSERT_EQ(pig_index_extend(ix, &keys), PIG_OK) << pig_last_error();
  }
  const pig_rows values = Rows(x.v.data(), PIG_F32, x.d, x.n);
  ExpectMatchesReference(ix, x, x.k, x.v, keys, values, c, "extended");
  pig_index_free(ix);
}

// The same rows through a block table (shuffled blocks, padded) and through a row stride (K and V
// interleaved): the output of the contiguous rows, bit for bit; and bf16 rows, the reference's
// on the rounded rows.
TEST(CApi, PagedStridedAndBf16RowsGiveTheSameAnswers) {
  const Data x(1000, 64, 2, 7);
  const pig_lsh_config c = Config();
  const size_t bt = 64, blocks = (x.n + bt - 1) / bt, stride = (bt + 3) * x.d * 4;
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(1));
  std::vector<float> kp(blocks * stride / 4, NAN), vp(kp.size(), NAN);
  for (size_t i = 0; i < x.n; ++i)
    for (size_t j = 0; j < x.d; ++j) {
      kp[(table[i / bt] * stride) / 4 + (i % bt) * x.d + j] = x.k[i * x.d + j];
      vp[(table[i / bt] * stride) / 4 + (i % bt) * x.d + j] = x.v[i * x.d + j];
    }
  std::vector<float> kv(2 * x.n * x.d); // [k0 v0 k1 v1 ...]
  for (size_t i = 0; i < x.n; ++i)
    for (size_t j = 0; j < x.d; ++j) {
      kv[(2 * i) * x.d + j] = x.k[i * x.d + j];
      kv[(2 * i + 1) * x.d + j] = x.v[i * x.d + j];
    }
  auto run = [&](const pig_rows &keys, const pig_rows &values) {
    pig_index *ix = nullptr;
    EXPECT_EQ(pig_index_build(&c, &keys, 0, &ix), PIG_OK) << pig_last_error();
    std::vector<float> out(x.G * x.d);
    EXPECT_EQ(pig_attend_sampled(ix, x.q.data(), x.G, 0, &keys, &values, out.data(), nullptr),
              PIG_OK)
        << pig_last_error();
    pig_index_free(ix);
    return out;
  };
  const std::vector<float> plain =
      run(Rows(x.k.data(), PIG_F32, x.d, x.n), Rows(x.v.data(), PIG_F32, x.d, x.n));
  pig_rows pk = Rows(kp.data(), PIG_F32, x.d, x.n), pv = Rows(vp.data(), PIG_F32, x.d, x.n);
  for (pig_rows *r : {&pk, &pv}) {
    r->block_table = table.data();
    r->n_blocks = blocks;
    r->block_tokens = bt;
    r->block_stride = stride;
  }
  EXPECT_EQ(run(pk, pv), plain) << "paged";
  pig_rows sk = Rows(kv.data(), PIG_F32, x.d, x.n), sv = Rows(kv.data() + x.d, PIG_F32, x.d, x.n);
  sk.row_stride = sv.row_stride = 2 * x.d * 4;
  EXPECT_EQ(run(sk, sv), plain) << "strided";

  std::vector<uint16_t> kb(x.k.size()), vb(x.v.size());
  std::vector<float> kr(x.k.size()), vr(x.v.size());
  for (size_t i = 0; i < kb.size(); ++i) {
    kb[i] = ToBf16(x.k[i]);
    vb[i] = ToBf16(x.v[i]);
    kr[i] = FromBf16(kb[i]);
    vr[i] = FromBf16(vb[i]);
  }
  const pig_rows bk = Rows(kb.data(), PIG_BF16, x.d, x.n), bv = Rows(vb.data(), PIG_BF16, x.d, x.n);
  pig_index *ix = nullptr;
  ASSERT_EQ(pig_index_build(&c, &bk, 0, &ix), PIG_OK) << pig_last_error();
  ExpectMatchesReference(ix, x, kr, vr, bk, bv, c, "bf16");
  pig_index_free(ix);
}

TEST(CApi, DenseAttentionIsExact) {
  const Data x(700, 128, 4, 9);
  const pig_rows keys = Rows(x.k.data(), PIG_F32, x.d, x.n),
                 values = Rows(x.v.data(), PIG_F32, x.d, x.n);
  for (auto [b, e] : {std::pair<size_t, size_t>{0, 700}, {100, 356}, {699, 700}}) {
    std::vector<float> out(x.G * x.d), lse(x.G);
    ASSERT_EQ(pig_attend_dense(x.q.data(), x.G, 0, &keys, &values, b, e, out.data(), lse.data()),
              PIG_OK)
        << pig_last_error();
    for (size_t h = 0; h < x.G; ++h) {
      const auto r =
          ref::dense_attention({&x.q[h * x.d], x.d}, ref::Matrix{&x.k[b * x.d], e - b, x.d},
                               ref::Matrix{&x.v[b * x.d], e - b, x.d});
      for (size_t j = 0; j < x.d; ++j)
        ASSERT_NEAR(out[h * x.d + j], r.out[j], 1e-5 * (1 + std::abs(r.out[j])));
      EXPECT_NEAR(lse[h], r.lse, 1e-4 * (1 + std::abs(r.lse)));
    }
  }
}

// Every function's error returns, each with a message that names what is wrong.
TEST(CApi, ErrorsAreStatusesWithMessages) {
  const Data x(300, 64, 2);
  const pig_lsh_config c = Config();
  const pig_rows keys = Rows(x.k.data(), PIG_F32, x.d, x.n),
                 values = Rows(x.v.data(), PIG_F32, x.d, x.n);
  auto expect = [](pig_status got, pig_status want, const char *needle) {
    EXPECT_EQ(got, want) << pig_last_error();
    EXPECT_NE(std::string(pig_last_error()).find(needle), std::string::npos)
        << "'" << pig_last_error() << "' lacks '" << needle << "'";
  };
  pig_index *ix = reinterpret_cast<pig_index *>(1);
  // NULL handles and pointers
  expect(pig_lsh_config_default(nullptr), PIG_ERR_NULL, "cfg is NULL");
  expect(pig_index_build(nullptr, &keys, 0, &ix), PIG_ERR_NULL, "cfg is NULL");
  EXPECT_EQ(ix, nullptr); // *out is NULL on failure
  expect(pig_index_build(&c, nullptr, 0, &ix), PIG_ERR_NULL, "keys is NULL");
  expect(pig_index_build(&c, &keys, 0, nullptr), PIG_ERR_NULL, "out is NULL");
  pig_rows nodata = keys;
  nodata.data = nullptr;
  expect(pig_index_build(&c, &nodata, 0, &ix), PIG_ERR_NULL, "keys->data is NULL");
  expect(pig_index_extend(nullptr, &keys), PIG_ERR_NULL, "index is NULL");
  size_t count = 0;
  uint32_t tok[4];
  expect(pig_index_retrieve(nullptr, x.q.data(), 1, tok, nullptr, 4, &count), PIG_ERR_NULL,
         "index is NULL");
  float out[256], lse[4];
  expect(pig_attend_sampled(nullptr, x.q.data(), 1, 0, &keys, &values, out, lse), PIG_ERR_NULL,
         "index is NULL");
  expect(pig_attend_dense(nullptr, 1, 0, &keys, &values, 0, 1, out, lse), PIG_ERR_NULL,
         "q is NULL");
  expect(pig_attend_dense(x.q.data(), 1, 0, &keys, &values, 0, 1, nullptr, lse), PIG_ERR_NULL,
         "out is NULL");
  expect(pig_index_info_get(nullptr, nullptr), PIG_ERR_NULL, "index is NULL");
  pig_index_free(nullptr); // nothing

  // impossible configurations and arguments
  pig_lsh_config bad = c;
  bad.K = 0;
  expect(pig_index_build(&bad, &keys, 0, &ix), PIG_ERR_INVALID, "cfg:");
  bad = c;
  bad.t = bad.L + 1;
  expect(pig_index_build(&bad, &keys, 0, &ix), PIG_ERR_INVALID, "cfg:");
  pig_rows odd = keys;
  odd.d = 63;
  expect(pig_index_build(&c, &odd, 0, &ix), PIG_ERR_INVALID, "d = 63");
  pig_rows narrow = keys;
  narrow.row_stride = 8;
  expect(pig_index_build(&c, &narrow, 0, &ix), PIG_ERR_INVALID, "row_stride 8");
  expect(pig_attend_dense(x.q.data(), 0, 0, &keys, &values, 0, 1, out, lse), PIG_ERR_INVALID,
         "group = 0");
  expect(pig_attend_dense(x.q.data(), 9, 0, &keys, &values, 0, 1, out, lse), PIG_ERR_INVALID,
         "group = 9");
  expect(pig_attend_dense(x.q.data(), 1, -1.0f, &keys, &values, 0, 1, out, lse), PIG_ERR_INVALID,
         "scale");
  expect(pig_attend_dense(x.q.data(), 1, NAN, &keys, &values, 0, 1, out, lse), PIG_ERR_INVALID,
         "scale");

  // dtypes
  pig_rows unknown = keys;
  unknown.dtype = static_cast<pig_dtype>(7);
  expect(pig_index_build(&c, &unknown, 0, &ix), PIG_ERR_DTYPE, "dtype 7");
  std::vector<uint16_t> kb(x.k.size());
  const pig_rows bf16 = Rows(kb.data(), PIG_BF16, x.d, x.n);
  expect(pig_attend_dense(x.q.data(), 1, 0, &bf16, &values, 0, 1, out, lse), PIG_ERR_DTYPE,
         "keys are bf16");

  // the index's own checks
  pig_rows first = keys;
  first.n = 200;
  ASSERT_EQ(pig_index_build(&c, &first, 250, &ix), PIG_OK) << pig_last_error();
  expect(pig_index_extend(ix, &bf16), PIG_ERR_DTYPE, "the index's f32");
  pig_rows fewer = keys;
  fewer.n = 100;
  expect(pig_index_extend(ix, &fewer), PIG_ERR_RANGE, "below the 200 rows already indexed");
  expect(pig_index_extend(ix, &keys), PIG_ERR_RANGE, "exceeds the capacity 250");
  expect(pig_attend_sampled(ix, x.q.data(), 1, 0, &keys, &values, out, lse), PIG_ERR_RANGE,
         "the index's 200 rows");
  expect(pig_attend_sampled(ix, x.q.data(), 1, 0, &first, &bf16, out, lse), PIG_ERR_DTYPE,
         "values are bf16");
  pig_rows vfirst = values;
  vfirst.n = 200;
  vfirst.row_stride = 2 * x.d * 4;
  expect(pig_attend_sampled(ix, x.q.data(), 1, 0, &first, &vfirst, out, lse), PIG_ERR_INVALID,
         "share their layout");
  // a buffer too small for the sample set: the size needed comes back
  const pig_status rs = pig_index_retrieve(ix, x.q.data(), 2, tok, nullptr, 4, &count);
  if (count > 4) {
    EXPECT_EQ(rs, PIG_ERR_RANGE);
    EXPECT_NE(std::string(pig_last_error()).find("the buffer holds 4"), std::string::npos);
  } else {
    EXPECT_EQ(rs, PIG_OK);
  }
  pig_index *none = nullptr;
  expect(pig_index_build(&c, &first, 100, &none), PIG_ERR_RANGE, "capacity 100 is below the 200");
  EXPECT_EQ(none, nullptr);
  pig_index_free(ix);
  ix = nullptr;

  // rows out of range and block tables too short
  expect(pig_attend_dense(x.q.data(), 1, 0, &keys, &values, 10, 10, out, lse), PIG_ERR_RANGE,
         "are empty");
  expect(pig_attend_dense(x.q.data(), 1, 0, &keys, &values, 0, 301, out, lse), PIG_ERR_RANGE,
         "past the 300 rows");
  std::vector<int32_t> table = {0, 1, 2, 3};
  pig_rows paged = keys;
  paged.block_table = table.data();
  paged.n_blocks = 4;
  paged.block_tokens = 64;
  paged.block_stride = 64 * x.d * 4;
  expect(pig_index_build(&c, &paged, 0, &ix), PIG_ERR_RANGE, "need 5 blocks of 64");
  paged.n_blocks = 5;
  table.push_back(-1);
  paged.block_table = table.data();
  expect(pig_index_build(&c, &paged, 0, &ix), PIG_ERR_RANGE, "block_table[4] = -1 is negative");
  paged.block_tokens = 0;
  expect(pig_index_build(&c, &paged, 0, &ix), PIG_ERR_INVALID, "block_tokens is 0");
  paged.block_tokens = 64;
  paged.block_stride = 16;
  expect(pig_index_build(&c, &paged, 0, &ix), PIG_ERR_INVALID, "block_stride 16");

  // the kernel list: a short buffer gets the size needed
  size_t needed = 0;
  char small[4];
  const pig_status s = pig_kernel_configs(small, sizeof small, &needed);
  EXPECT_GE(needed, 1u);
  EXPECT_EQ(s, needed > sizeof small ? PIG_ERR_RANGE : PIG_OK);
  std::string list(needed, '\0');
  ASSERT_EQ(pig_kernel_configs(list.data(), list.size(), &needed), PIG_OK);
  expect(pig_kernel_configs(nullptr, 0, nullptr), PIG_ERR_NULL, "needed is NULL");

  // kernel libraries: a missing file, and a shared object that is not one (libpig.so itself)
  expect(pig_load_kernels(nullptr, &count), PIG_ERR_NULL, "path is NULL");
  expect(pig_load_kernels("/nonexistent/libk.so", &count), PIG_ERR_INVALID, "/nonexistent/libk.so");
  EXPECT_EQ(count, 0u);
  expect(pig_load_kernels(PIG_TEST_LIBPIG, nullptr), PIG_ERR_INVALID, "no pig_kernel_plugin");

  // a success clears the thread's message; another thread's failure is its own
  pig_lsh_config ok;
  ASSERT_EQ(pig_lsh_config_default(&ok), PIG_OK);
  EXPECT_STREQ(pig_last_error(), "");
  std::string other;
  std::thread([&] {
    pig_lsh_config_default(nullptr);
    other = pig_last_error();
  }).join();
  EXPECT_NE(other.find("cfg is NULL"), std::string::npos);
  EXPECT_STREQ(pig_last_error(), "");
  pig_index_free(ix);
}

TEST(CApi, DefaultsVersionAndKernelList) {
  pig_lsh_config c;
  ASSERT_EQ(pig_lsh_config_default(&c), PIG_OK);
  EXPECT_EQ(c.K, 10);
  EXPECT_EQ(c.L, 150);
  EXPECT_EQ(c.t, 2);
  EXPECT_EQ(c.sink, 4u);
  EXPECT_EQ(c.local, 64u);
  EXPECT_STREQ(pig_version(), "0.1.0");
  size_t needed = 0;
  std::string list(4096, '\0');
  ASSERT_EQ(pig_kernel_configs(list.data(), list.size(), &needed), PIG_OK);
  list.resize(needed - 1);
#ifdef PIG_TEST_GENERATED
  EXPECT_NE(list.find("K=10 L=150 d=64 bf16"), std::string::npos) << list; // configs/kernels.txt
#endif
}

} // namespace
