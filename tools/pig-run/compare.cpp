// pig-run --compare: one dense prefill, then each method decodes from the same KV prefix; the
// texts and the figures side by side.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "pig/app/generate.h"
#include "pig/app/text.h"

#include "run.h"

namespace pig::run {

using namespace pig::runtime;

// --compare: one dense prefill, then each method decodes from the same KV prefix; the texts and
// the figures are printed side by side.
int RunCompare(const Options &o) {
  Prepared p = Prepare(o);
  const LlamaConfig &cfg = p.model->config();
  const Tokenizer &tok = p.model->tokenizer();
  ThreadPool pool(o.threads);
  const AttentionShape shape = cfg.Shape(p.ctx);
  AttentionSpec dense_spec = o.attention;
  dense_spec.method = pig::spec::Method::dense;
  LlamaSession prefill(*p.model, pool, p.ctx, MakeAttention(dense_spec, shape));
  std::fprintf(stderr,
               "pig-run: %s, %zu threads, %s kernels, weights by %s; prompt %zu tokens, prefilled "
               "once (dense)\n",
               o.model.path.c_str(), pool.size(), prefill.kernels().target,
               prefill.kernels().int8_instruction, p.prompt.size());
  if (p.tuning)
    PrintTuning(*p.tuning);
  double prefill_s = 0;
  const std::vector<float> logits = pig::app::Prefill(prefill, cfg.vocab, p.prompt, prefill_s);
  std::fprintf(stderr, "prefill: %.1f s = %.1f tokens/s\n", prefill_s,
               double(p.prompt.size()) / prefill_s);

  struct Column {
    std::string name;
    pig::app::DecodeResult r;
    AttentionStats st;
    size_t kv_bytes = 0;
  };
  std::vector<Column> cols;
  for (const pig::spec::Method method : o.compare) {
    const AttentionSpec spec = p.ForMethod(o, method);
    std::unique_ptr<Attention> attn = MakeAttention(spec, shape);
    attn->LoadPrefix(prefill.attention().cache(), p.prompt.size());
    LlamaSession s(*p.model, pool, p.ctx, std::move(attn));
    s.SetPosition(p.prompt.size());
    std::fprintf(stderr, "decoding with %s\n", spec.str(cfg.n_layers).c_str());
    Column c;
    c.name = method != pig::spec::Method::magicpig ? std::string(pig::spec::name(method))
             : p.tuning                            ? "magicpig (tuned, per layer)"
                        : "magicpig K=" + std::to_string(spec.K) + " L=" + std::to_string(spec.L);
    if (method == pig::spec::Method::magicpig && !spec.transform.identity())
      c.name.append(" ").append(spec.transform.str());
    c.r = pig::app::Decode(s, tok, logits, o.generate);
    c.st = s.attention().stats();
    c.kv_bytes = s.attention().cache().MemoryBytes();
    cols.push_back(std::move(c));
  }

  const int w = 40;
  auto row = [&](const char *label, auto cell) {
    std::printf("%-24s", label);
    for (const Column &c : cols)
      std::printf(" | %-*s", w, cell(c).c_str());
    std::printf("\n");
  };
  auto fmt = [](const char *f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return std::string(b);
  };
  std::printf("\n");
  row("", [](const Column &c) { return c.name; });
  row("decode tokens/s", [&](const Column &c) {
    return fmt("%.1f", c.r.TokensPerSecond()) + " (" + std::to_string(c.r.steps) + " steps)";
  });
  row("first step (s)", [&](const Column &c) { return fmt("%.3f", c.r.first_s); });
  row("cost2 (sampled)", [&](const Column &c) {
    return c.st.indexed > 0 ? fmt("%.2f %%", 100 * c.st.cost2()) : std::string("-");
  });
  row("cost1 (index traffic)", [&](const Column &c) {
    return c.st.index_bytes_read > 0 ? fmt("%.2f %%", 100 * c.st.cost1()) : std::string("-");
  });
  row("GQA union / sum of sets", [&](const Column &c) {
    return c.st.gathered > 0 ? fmt("%.1f %%", 100 * c.st.gather_ratio()) : std::string("-");
  });
  row("KV cache MiB", [&](const Column &c) { return fmt("%.1f", double(c.kv_bytes) / 1048576); });
  row("index MiB", [&](const Column &c) {
    return c.st.index_bytes ? fmt("%.1f", double(c.st.index_bytes) / 1048576) : std::string("-");
  });
  if (std::any_of(cols.begin(), cols.end(), [](const Column &c) { return c.st.hash_bytes > 0; }))
    row("fitted hashing MiB", [&](const Column &c) {
      return c.st.hash_bytes ? fmt("%.1f", double(c.st.hash_bytes) / 1048576) : std::string("-");
    });
  if (!o.expect.empty()) {
    const std::string label = "answer has \"" + o.expect + "\"";
    row(label.size() <= 24 ? label.c_str() : "answer correct", [&](const Column &c) {
      return std::string(AnswerContains(c.r.text, o.expect) ? "yes" : "NO");
    });
  }
  row("same tokens as first", [&](const Column &c) {
    size_t same = 0;
    while (same < c.r.tokens.size() && same < cols[0].r.tokens.size() &&
           c.r.tokens[same] == cols[0].r.tokens[same])
      ++same;
    return std::to_string(same) + " of " + std::to_string(c.r.tokens.size());
  });
  std::printf("\n");
  std::vector<std::vector<std::string>> wrapped;
  size_t lines = 0;
  for (const Column &c : cols) {
    wrapped.push_back(pig::app::Wrap(c.r.text, size_t(w)));
    lines = std::max(lines, wrapped.back().size());
  }
  for (size_t i = 0; i < lines; ++i) {
    std::printf("%-24s", i == 0 ? "generated text" : "");
    for (const auto &col : wrapped)
      std::printf(" | %-*s", w, i < col.size() ? col[i].c_str() : "");
    std::printf("\n");
  }
  if (o.generate.rate_steps > 0)
    std::printf("\ndecode rates are over %zu steps per method: past the end of an answer the "
                "decode goes on, timed but not shown (--rate-steps)\n",
                o.generate.rate_steps);
  if (o.demo)
    std::printf("the rates are at %zu tokens of context, where attention is a small part of a "
                "step; LSH sampling's speed-up grows with the context: build/bin/pig-bench-context "
                "measures it at 2k-32k\n",
                p.prompt.size());
  std::printf("\nkernels:\n");
  for (const Column &c : cols)
    std::printf("  %s: %s\n", c.name.c_str(), c.st.kernels.c_str());
  return 0;
}

} // namespace pig::run
