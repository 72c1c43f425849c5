// The option groups of pig_app: valid command lines fill the structs, every kind of bad one is a
// usage error (exit 2) whose message names the flag, the old spellings are accepted with a
// warning naming the new one.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "pig/app/options.h"
#include "pig/tune/hybrid.h"

namespace {

using pig::app::Parse;
using pig::runtime::AttentionSpec;
using ::testing::ExitedWithCode;

// argv for Parse: {"tool", args...}.
struct Argv {
  explicit Argv(std::initializer_list<std::string> args) : s{"tool"} {
    s.insert(s.end(), args);
    for (const std::string &a : s)
      p.push_back(a.c_str());
  }
  int argc() const { return int(p.size()); }
  const char *const *argv() const { return p.data(); }
  std::vector<std::string> s;
  std::vector<const char *> p;
};

// A tool with every shared group and two options of its own.
struct Tool {
  Tool() {
    pig::app::Init(app);
    pig::app::AddModelOptions(app, model, true);
    flags = pig::app::AddAttentionOptions(app, spec);
    pig::app::AddKvOption(app, spec.kv_dtype);
    pig::app::AddTuningOptions(app, tuning);
    pig::app::AddThreadsOption(app, threads);
    app.add_option("--n", n)->check(pig::app::Integer(256, 1u << 22));
    app.add_option("--seed", seed)->check(pig::app::Integer(0, UINT64_MAX));
  }
  void Run(std::initializer_list<std::string> args) {
    const Argv a(args);
    Parse(app, a.argc(), a.argv());
  }
  CLI::App app{"a test tool", "tool"};
  pig::app::ModelOptions model;
  AttentionSpec spec;
  pig::app::AttentionFlags flags;
  pig::app::TuningOptions tuning;
  size_t threads = 0, n = 16384;
  std::uint64_t seed = 1;
};

// Parses args in a fresh Tool (in a child process for the death tests).
void ParseIn(std::initializer_list<std::string> args) {
  Tool t;
  t.Run(args);
  std::exit(0);
}

TEST(AppOptions, ValidCommandLineFillsEveryGroup) {
  Tool t;
  t.Run({"--model",
         "m.gguf",
         "--ctx",
         "4096",
         "--long-context",
         "--attention",
         "magicpig",
         "--lsh",
         "K=8,L=75",
         "--transform",
         "whiten:a=0.25",
         "--sink",
         "2",
         "--local=32",
         "--dense-layers",
         "0,3",
         "--budget",
         "0.1",
         "--schedule",
         "block=32",
         "--kv",
         "q8",
         "--tuning",
         "p.json",
         "--max-error",
         "0.2",
         "--threads",
         "3",
         "--n",
         "512",
         "--seed",
         "18446744073709551615"});
  EXPECT_EQ(t.model.path, "m.gguf");
  EXPECT_EQ(t.model.ctx, 4096u);
  EXPECT_TRUE(t.model.long_context);
  EXPECT_EQ(t.spec.method, pig::spec::Method::magicpig);
  EXPECT_EQ(t.spec.K, 8);
  EXPECT_EQ(t.spec.L, 75);
  EXPECT_EQ(t.spec.t, 2); // the default kept
  EXPECT_EQ(t.spec.transform.str(), "whiten:a=0.25");
  EXPECT_EQ(t.spec.sink, 2u);
  EXPECT_EQ(t.spec.local, 32u);
  EXPECT_EQ(t.spec.dense_layers, (std::vector<size_t>{0, 3}));
  EXPECT_TRUE(t.spec.dense_layers_set);
  EXPECT_DOUBLE_EQ(t.spec.budget, 0.1);
  EXPECT_EQ(t.spec.schedule.block, 32);
  EXPECT_EQ(t.spec.kv_dtype, pig::runtime::lsh::DType::q8);
  EXPECT_EQ(t.tuning.file, "p.json");
  ASSERT_TRUE(t.tuning.max_error);
  EXPECT_DOUBLE_EQ(*t.tuning.max_error, 0.2);
  EXPECT_EQ(t.threads, 3u);
  EXPECT_EQ(t.n, 512u);
  EXPECT_EQ(t.seed, UINT64_MAX);
  EXPECT_EQ(t.flags.lsh->count(), 1u);
  EXPECT_EQ(t.flags.attention->count(), 1u);
}

TEST(AppOptions, DefaultsStayWhenNotGiven) {
  Tool t;
  t.Run({});
  const AttentionSpec def;
  EXPECT_EQ(t.spec.method, def.method);
  EXPECT_EQ(t.spec.K, def.K);
  EXPECT_FALSE(t.spec.dense_layers_set);
  EXPECT_FALSE(t.tuning.max_error);
  EXPECT_EQ(t.flags.lsh->count(), 0u);
  EXPECT_EQ(t.model.path, pig::runtime::DefaultModelPath());
}

TEST(AppOptions, RepeatedOptionTakesTheLastValueAndNoneClearsDenseLayers) {
  Tool t;
  t.Run({"--threads", "2", "--threads", "5", "--dense-layers", "none"});
  EXPECT_EQ(t.threads, 5u);
  EXPECT_TRUE(t.spec.dense_layers_set);
  EXPECT_TRUE(t.spec.dense_layers.empty());
}

TEST(AppOptions, HelpExitsZero) { EXPECT_EXIT(ParseIn({"--help"}), ExitedWithCode(0), ""); }

TEST(AppOptions, MalformedNumberIsAUsageErrorNamingTheFlag) {
  EXPECT_EXIT(ParseIn({"--n", "abc"}), ExitedWithCode(2),
              "tool: --n expects an integer in \\[256, 4194304\\], got 'abc'");
  EXPECT_EXIT(ParseIn({"--n", "300x"}), ExitedWithCode(2), "tool: --n expects an integer");
  EXPECT_EXIT(ParseIn({"--budget", "0.1.2"}), ExitedWithCode(2),
              "tool: --budget expects a number in \\(0, 1\\], got '0.1.2'");
  EXPECT_EXIT(ParseIn({"--max-error", "nan"}), ExitedWithCode(2),
              "tool: --max-error expects a number > 0, got 'nan'");
  EXPECT_EXIT(ParseIn({"--dense-layers", "0,x"}), ExitedWithCode(2),
              "tool: --dense-layers expects integers in \\[0, 65536\\] separated by commas");
  EXPECT_EXIT(ParseIn({"--lsh", "K=ten"}), ExitedWithCode(2),
              "tool: --lsh: K expects a whole number, got 'ten'");
}

TEST(AppOptions, OutOfRangeValuesDoNotWrapAround) {
  EXPECT_EXIT(ParseIn({"--threads", "-1"}), ExitedWithCode(2),
              "tool: --threads expects an integer in \\[0, 1024\\], got '-1'");
  EXPECT_EXIT(ParseIn({"--seed", "18446744073709551616"}), ExitedWithCode(2),
              "tool: --seed expects an integer in \\[0, 18446744073709551615\\]");
  EXPECT_EXIT(ParseIn({"--n", "10"}), ExitedWithCode(2), "tool: --n expects an integer");
  EXPECT_EXIT(ParseIn({"--lsh", "K=4294967306"}), ExitedWithCode(2),
              "tool: --lsh: K expects a whole number, got '4294967306'");
  EXPECT_EXIT(ParseIn({"--lsh", "K=17"}), ExitedWithCode(2),
              "tool: --lsh: K = 17 is outside \\[1, 16\\]");
  EXPECT_EXIT(ParseIn({"--budget", "0"}), ExitedWithCode(2),
              "tool: --budget expects a number in \\(0, 1\\], got '0'");
  EXPECT_EXIT(ParseIn({"--ctx", "99999999999"}), ExitedWithCode(2), "tool: --ctx expects");
}

TEST(AppOptions, UnknownFlagIsAUsageErrorNamingIt) {
  EXPECT_EXIT(ParseIn({"--bogus"}), ExitedWithCode(2),
              "tool: unknown argument '--bogus' \\(see --help\\)");
  EXPECT_EXIT(ParseIn({"--threads", "2", "stray"}), ExitedWithCode(2),
              "tool: unknown argument 'stray'");
}

TEST(AppOptions, MissingValueIsAUsageErrorNamingTheFlag) {
  EXPECT_EXIT(ParseIn({"--threads"}), ExitedWithCode(2), "tool: --threads needs a value");
  EXPECT_EXIT(ParseIn({"--ctx", "5", "--model"}), ExitedWithCode(2), "tool: --model needs a value");
  EXPECT_EXIT(ParseIn({"--lsh"}), ExitedWithCode(2), "tool: --lsh needs a value");
}

TEST(AppOptions, WordsTheGroupsRefuse) {
  EXPECT_EXIT(
      ParseIn({"--attention", "sparse"}), ExitedWithCode(2),
      "tool: --attention expects one of dense, magicpig, topk, quest, oracle, lsh-hybrid, got "
      "'sparse'");
  EXPECT_EXIT(ParseIn({"--kv", "f16"}), ExitedWithCode(2),
              "tool: --kv expects bf16, f32 or q8 \\(8-bit, a scale per 32 elements\\), got "
              "'f16'");
  EXPECT_EXIT(ParseIn({"--transform", "rotate"}), ExitedWithCode(2),
              "tool: --transform: hash transform 'rotate': unknown transform");
  EXPECT_EXIT(ParseIn({"--transform", "mips"}), ExitedWithCode(2),
              "tool: --transform: hash transform mips:q=1: the runtime serves plain and "
              "whiten:a=A");
  EXPECT_EXIT(ParseIn({"--schedule", "block=48"}), ExitedWithCode(2),
              "tool: --schedule: schedule knob 'block' = 48 is illegal");
  EXPECT_EXIT(ParseIn({"--lsh", "Q=3"}), ExitedWithCode(2), "tool: --lsh: unknown key 'Q'");
  EXPECT_EXIT(ParseIn({"--tuning", ""}), ExitedWithCode(2), "tool: --tuning needs a file");
}

TEST(AppOptions, MaxErrorWithoutTuningIsAUsageError) {
  EXPECT_EXIT(
      {
        Tool t;
        t.Run({"--max-error", "0.1"});
        pig::app::CheckTuningOptions(t.app, t.tuning);
        std::exit(0);
      },
      ExitedWithCode(2), "tool: --max-error selects a point from --tuning FILE's records");
}

TEST(AppOptions, OldLshSpellingsAreAcceptedWithAWarning) {
  {
    Tool t;
    testing::internal::CaptureStderr();
    t.Run({"--lsh", "8:75"});
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(t.spec.K, 8);
    EXPECT_EQ(t.spec.L, 75);
    EXPECT_EQ(t.spec.t, 2);
    EXPECT_NE(err.find("tool: warning: --lsh 8:75 is a deprecated spelling (accepted for one "
                       "release): write --lsh K=8,L=75,t=2"),
              std::string::npos)
        << err;
  }
  {
    Tool t;
    testing::internal::CaptureStderr();
    t.Run({"--lsh", "9,120,3"});
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(t.spec.K, 9);
    EXPECT_EQ(t.spec.L, 120);
    EXPECT_EQ(t.spec.t, 3);
    EXPECT_NE(err.find("write --lsh K=9,L=120,t=3"), std::string::npos) << err;
  }
  {
    Tool t;
    testing::internal::CaptureStderr();
    t.Run({"--lsh", "K=8,transform=whiten:a=0.5"});
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(t.spec.K, 8);
    EXPECT_EQ(t.spec.transform.str(), "whiten:a=0.5");
    EXPECT_NE(err.find("write --transform whiten:a=0.5"), std::string::npos) << err;
  }
  { // the one spelling: no warning
    Tool t;
    testing::internal::CaptureStderr();
    t.Run({"--lsh", "K=8,L=75,t=1"});
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
    EXPECT_EQ(t.spec.t, 1);
  }
  // An alias is held to the same limits; a list is not one configuration.
  EXPECT_EXIT(ParseIn({"--lsh", "17:75"}), ExitedWithCode(2),
              "tool: --lsh: K = 17 is outside \\[1, 16\\]");
  EXPECT_EXIT(ParseIn({"--lsh", "8:75,9:120"}), ExitedWithCode(2),
              "tool: --lsh: takes one configuration");
  EXPECT_EXIT(ParseIn({"--lsh", "8,75"}), ExitedWithCode(2),
              "tool: --lsh expects K=..,L=..,t=.. \\(e.g. K=10,L=150,t=2\\), got '8,75'");
  EXPECT_EXIT(ParseIn({"--lsh", "transform=rotate"}), ExitedWithCode(2),
              "tool: --lsh: hash transform 'rotate': unknown transform");
}

// A tool taking several configurations.
struct ListTool {
  ListTool() {
    pig::app::Init(app);
    pig::app::AddLshListOption(app, list, "configurations");
  }
  void Run(std::initializer_list<std::string> args) {
    const Argv a(args);
    Parse(app, a.argc(), a.argv());
  }
  CLI::App app{"a test tool", "tool"};
  std::vector<pig::spec::LshParams> list{{10, 150, 2}};
};

TEST(AppOptions, LshListTakesRepeatedAndSeveralValues) {
  {
    ListTool t;
    t.Run({});
    EXPECT_EQ(t.list, (std::vector<pig::spec::LshParams>{{10, 150, 2}}));
  }
  {
    ListTool t;
    t.Run({"--lsh", "K=8,L=75", "--lsh", "K=9,L=120,t=1"});
    EXPECT_EQ(t.list, (std::vector<pig::spec::LshParams>{{8, 75, 2}, {9, 120, 1}}));
  }
  {
    ListTool t;
    t.Run({"--lsh", "K=8,L=75", "K=7,L=64"});
    EXPECT_EQ(t.list, (std::vector<pig::spec::LshParams>{{8, 75, 2}, {7, 64, 2}}));
  }
  {
    ListTool t;
    testing::internal::CaptureStderr();
    t.Run({"--lsh", "10:150,8:75", "--lsh", "9,120,3"});
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(t.list, (std::vector<pig::spec::LshParams>{{10, 150, 2}, {8, 75, 2}, {9, 120, 3}}));
    EXPECT_NE(err.find("write --lsh K=10,L=150,t=2 K=8,L=75,t=2"), std::string::npos) << err;
  }
  EXPECT_EXIT(
      {
        ListTool t;
        t.Run({"--lsh", "K=8", "K=0"});
        std::exit(0);
      },
      ExitedWithCode(2), "tool: --lsh: K = 0 is outside");
}

// A tool with commands (pig-tune, pig-eval): a command's option warns and errs in the tool's
// name, not the command's.
TEST(AppOptions, CommandOptionsSpeakInTheToolsName) {
  auto make = [](CLI::App &app, std::vector<pig::spec::LshParams> &list, size_t &threads) {
    pig::app::Init(app);
    pig::app::AddThreadsOption(app, threads);
    pig::app::AddLshListOption(*app.add_subcommand("speed", "a command"), list, "configurations");
  };
  {
    CLI::App app{"a test tool", "tool"};
    std::vector<pig::spec::LshParams> list;
    size_t threads = 0;
    make(app, list, threads);
    testing::internal::CaptureStderr();
    const Argv a({"--threads", "3", "speed", "--lsh", "8:75"});
    Parse(app, a.argc(), a.argv());
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(threads, 3u);
    EXPECT_EQ(list, (std::vector<pig::spec::LshParams>{{8, 75, 2}}));
    EXPECT_EQ(err.rfind("tool: warning: --lsh 8:75 is a deprecated spelling", 0), 0u) << err;
  }
  auto conflict = [&make] {
    CLI::App app{"a test tool", "tool"};
    std::vector<pig::spec::LshParams> list;
    size_t threads = 0;
    make(app, list, threads);
    pig::app::UsageError(*app.get_subcommand("speed"), "--lsh: a conflict");
  };
  EXPECT_EXIT(conflict(), ExitedWithCode(2),
              "^tool: --lsh: a conflict\nrun tool --help for the options\n$");
}

TEST(AppOptions, HelpListsTheGroups) {
  Tool t;
  const std::string help = t.app.help();
  for (const char *s :
       {"usage: tool", "Model:", "Attention:", "Tuning (pig-tune's operating points):",
        "--lsh K=..,L=..,t=..", "--kv bf16|f32|q8", "--threads"})
    EXPECT_NE(help.find(s), std::string::npos) << s << "\n" << help;
}

// --schedule alone (pig-bench-attention's): the knobs parsed, an illegal one refused naming the
// flag, in both spellings (--schedule KNOBS and --schedule=KNOBS).
void ParseScheduleIn(std::initializer_list<std::string> args) {
  CLI::App app{"a test tool", "tool"};
  pig::app::Init(app);
  pig::runtime::lsh::Schedule s;
  pig::app::AddScheduleOption(app, s);
  const Argv a(args);
  Parse(app, a.argc(), a.argv());
  std::exit(s.block == 32 && s.parts == 1 ? 0 : 1);
}

TEST(AppOptions, ScheduleOption) {
  EXPECT_EXIT(ParseScheduleIn({"--schedule", "block=32 parts=1"}), ExitedWithCode(0), "");
  EXPECT_EXIT(ParseScheduleIn({"--schedule=block=32,parts=1"}), ExitedWithCode(0), "");
  EXPECT_EXIT(ParseScheduleIn({"--schedule=block=48"}), ExitedWithCode(2),
              "tool: --schedule: schedule knob 'block' = 48 is illegal");
  EXPECT_EXIT(ParseScheduleIn({"--schedule"}), ExitedWithCode(2), "tool: --schedule needs a value");
}

} // namespace

namespace {

// --hybrid @FILE[:pairs]: the spec of pig-tune hybrid's file, pairs after it override it; a
// request (pig-serve's "pig" object, which takes no hybrid field) and Python's AttentionSpec cannot
// name a file, whatever the file holds.
TEST(AppOptions, HybridSpecFromAFile) {
  pig::tune::HybridPoint p;
  p.spec = "head=0.5:floor=0.05:rank=hamming:bits=512";
  p.budget = "= magicpig K=10 L=150";
  p.cost2 = 0.03;
  p.contexts = {2048};
  const std::string path = testing::TempDir() + "/options-hybrid.json";
  pig::tune::save_hybrid_point(path, p);

  const pig::ref::HybridConfig a = pig::app::ParseHybridSpec("@" + path);
  EXPECT_EQ(a.head_share, 0.5);
  EXPECT_EQ(a.floor, 0.05);
  EXPECT_EQ(a.bits, 512);
  const pig::ref::HybridConfig b = pig::app::ParseHybridSpec("@" + path + ":floor=0.2:budget=3%");
  EXPECT_EQ(b.head_share, 0.5);
  EXPECT_EQ(b.floor, 0.2);
  EXPECT_DOUBLE_EQ(b.budget, 0.03);
  EXPECT_EQ(pig::app::ParseHybridSpec("head=0.1").head_share, 0.1);

  AttentionSpec spec;
  Argv argv({"--attention", "lsh-hybrid", "--hybrid", "@" + path});
  CLI::App app{"t", "tool"};
  pig::app::Init(app);
  pig::app::AddAttentionOptions(app, spec);
  pig::app::Parse(app, argv.argc(), argv.argv());
  EXPECT_EQ(spec.hybrid.head_share, 0.5);
  EXPECT_EQ(spec.hybrid.bits, 512);

  EXPECT_THROW(pig::app::ParseHybridSpec("@"), std::invalid_argument);
  EXPECT_THROW(pig::app::ParseHybridSpec("@" + path + ":floor=7"), std::invalid_argument);
  EXPECT_THROW(pig::app::ParseHybridSpec("@" + testing::TempDir() + "/no-such.json"),
               std::invalid_argument);
  EXPECT_THROW(pig::app::ParseHybridSpec("@" + path, /*files=*/false), std::invalid_argument);
  using pig::app::Front;
  for (const auto &[front, message] :
       {std::pair{Front::kPython, "hybrid: @FILE is read only from a tool's command line"},
        std::pair{Front::kRequest, "unknown field 'hybrid'"}}) {
    try {
      AttentionSpec s;
      pig::app::ApplyFields(s, front, {{"hybrid", "@" + path}});
      ADD_FAILURE() << "a request read a file";
    } catch (const std::invalid_argument &e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

} // namespace
