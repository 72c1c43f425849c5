// The table of attention fields (pig/app/attention_fields.h) read by its three front ends: every
// field is an option of the command line with the table's help, a request's and Python's fields
// are the table's, a good value sets the same spec through each front end, and a bad one is
// refused with the same message, only the field's name spelled the front end's way.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "pig/app/attention_fields.h"
#include "pig/app/options.h"

namespace {

using pig::app::AttentionField;
using pig::app::AttentionFields;
using pig::app::FieldValue;
using pig::app::Front;
using pig::runtime::AttentionSpec;

// A good and a bad value of every field, as text; the test fails when the table grows a field
// this list does not cover.
struct Values {
  std::string good, bad;
};
const std::map<std::string, Values> kValues = {
    {"attention", {"magicpig", "sparse"}},
    {"lsh", {"K=8,L=75", "K=0"}},
    {"transform", {"whiten:a=0.25", "rotate"}},
    {"sink", {"2", "33554432"}},
    {"local", {"32", "16777217"}},
    {"mean_window", {"1024", "16777217"}},
    {"dense_below", {"2048", "16777217"}},
    {"dense_layers", {"0,3", "0,x"}},
    {"budget", {"0.1", "1.5"}},
    {"hybrid", {"head=0.5:floor=0.2", "head=-1"}},
    {"schedule", {"block=32", "block=48"}},
    {"kv", {"q8", "f16"}},
};

// Python's value of a field: its numbers as numbers (sink=2, budget=0.1), its text as text.
FieldValue PythonValue(const AttentionField &f, const std::string &text) {
  const std::string name = f.name;
  if (name == "sink" || name == "local" || name == "mean_window" || name == "dense_below")
    return std::uint64_t(std::strtoull(text.c_str(), nullptr, 10));
  if (name == "budget")
    return std::strtod(text.c_str(), nullptr);
  return text;
}

// A tool with the attention options: the spec a command line sets, or its usage message.
struct CommandLine {
  CommandLine() {
    pig::app::Init(app);
    pig::app::AddAttentionOptions(app, spec);
    pig::app::AddKvOption(app, spec.kv_dtype);
  }
  std::string Parse(const std::string &flag, const std::string &value) {
    std::vector<std::string> args = {value, flag}; // CLI11 takes argv reversed
    try {
      app.parse(args);
    } catch (const CLI::Error &e) {
      return pig::app::UsageMessage(e);
    }
    return "";
  }
  CLI::App app{"a test tool", "tool"};
  AttentionSpec spec;
};

std::string Describe(const AttentionSpec &s) {
  std::string dense;
  for (size_t l : s.dense_layers)
    dense += std::to_string(l) + ",";
  return s.str(30) + " method=" + s.method_name() + " transform=" + s.transform.str() +
         " budget=" + std::to_string(s.budget) + " hybrid=" + s.hybrid.str() +
         " schedule=" + s.schedule.str() + " dense=" + dense +
         (s.dense_layers_set ? " set" : " unset") + " K=" + std::to_string(s.K) +
         " L=" + std::to_string(s.L) + " t=" + std::to_string(s.t) +
         " sink=" + std::to_string(s.sink) + " local=" + std::to_string(s.local) +
         " mean_window=" + std::to_string(s.mean_window) +
         " dense_below=" + std::to_string(s.dense_below);
}

TEST(AttentionFields, EveryFieldIsAnOptionWithTheTablesHelp) {
  CommandLine cli;
  std::set<std::string> flags;
  for (const AttentionField &f : AttentionFields()) {
    const std::string flag = pig::app::KeyOf(f, Front::kCommandLine);
    const CLI::Option *o = cli.app.get_option_no_throw(flag);
    ASSERT_NE(o, nullptr) << flag;
    EXPECT_EQ(o->get_description(), f.help) << flag;
    EXPECT_EQ(o->get_group(), pig::app::kAttentionGroup) << flag;
    EXPECT_EQ(o->get_type_name().rfind(f.type_name, 0), 0u) << flag;
    flags.insert(flag);
  }
  // and the attention group holds nothing else
  for (const CLI::Option *o : cli.app.get_options()) {
    if (o->get_group() == pig::app::kAttentionGroup) {
      EXPECT_TRUE(flags.count(o->get_name())) << o->get_name();
    }
  }
  EXPECT_EQ(flags.size(), AttentionFields().size());
}

// Which front end takes which field: a request takes no hybrid (it is not served; a request reads
// no file) and Python's AttentionSpec no schedule; Python's keyword for --attention is method.
TEST(AttentionFields, EachFrontEndTakesItsFields) {
  std::vector<std::string> request, python;
  for (const AttentionField &f : AttentionFields()) {
    if (pig::app::Takes(f, Front::kRequest))
      request.push_back(pig::app::KeyOf(f, Front::kRequest));
    if (pig::app::Takes(f, Front::kPython))
      python.push_back(pig::app::KeyOf(f, Front::kPython));
    EXPECT_TRUE(pig::app::Takes(f, Front::kCommandLine));
    EXPECT_EQ(kValues.count(f.name), 1u) << f.name << ": give the test its values";
  }
  EXPECT_EQ(request, (std::vector<std::string>{"attention", "lsh", "transform", "sink", "local",
                                               "mean_window", "dense_below", "dense_layers",
                                               "budget", "schedule", "kv"}));
  EXPECT_EQ(python,
            (std::vector<std::string>{"method", "lsh", "transform", "sink", "local", "mean_window",
                                      "dense_below", "dense_layers", "budget", "hybrid", "kv"}));
  EXPECT_EQ(pig::app::SpellingOf(pig::app::FieldNamed("dense_layers"), Front::kCommandLine),
            "--dense-layers");
  EXPECT_EQ(pig::app::SpellingOf(pig::app::FieldNamed("dense_layers"), Front::kRequest),
            "pig.dense_layers");
  EXPECT_EQ(pig::app::SpellingOf(pig::app::FieldNamed("attention"), Front::kPython), "method");
}

TEST(AttentionFields, AGoodValueSetsTheSameSpecThroughEveryFrontEnd) {
  for (const AttentionField &f : AttentionFields()) {
    const Values &v = kValues.at(f.name);
    CommandLine cli;
    ASSERT_EQ(cli.Parse(pig::app::KeyOf(f, Front::kCommandLine), v.good), "") << f.name;
    EXPECT_NE(Describe(cli.spec), Describe(AttentionSpec{}))
        << f.name << ": the value is a default";
    for (const Front front : {Front::kRequest, Front::kPython}) {
      if (!pig::app::Takes(f, front))
        continue;
      AttentionSpec s;
      const FieldValue value =
          front == Front::kPython ? PythonValue(f, v.good) : FieldValue(v.good);
      pig::app::ApplyFields(s, front, {{pig::app::KeyOf(f, front), value}});
      EXPECT_EQ(Describe(s), Describe(cli.spec)) << f.name;
      EXPECT_EQ(s.kv_dtype, cli.spec.kv_dtype) << f.name;
    }
  }
}

TEST(AttentionFields, ABadValueHasTheSameMessageInEveryFrontEnd) {
  for (const AttentionField &f : AttentionFields()) {
    const Values &v = kValues.at(f.name);
    const std::string flag = pig::app::KeyOf(f, Front::kCommandLine);
    CommandLine cli;
    const std::string said = cli.Parse(flag, v.bad);
    ASSERT_EQ(said.rfind(flag, 0), 0u) << f.name << ": " << said;
    for (const Front front : {Front::kRequest, Front::kPython}) {
      if (!pig::app::Takes(f, front))
        continue;
      const FieldValue value = front == Front::kPython ? PythonValue(f, v.bad) : FieldValue(v.bad);
      try {
        AttentionSpec s;
        pig::app::ApplyFields(s, front, {{pig::app::KeyOf(f, front), value}});
        ADD_FAILURE() << f.name << " = " << v.bad << " accepted";
      } catch (const std::invalid_argument &e) {
        EXPECT_EQ(e.what(), pig::app::SpellingOf(f, front) + said.substr(flag.size())) << f.name;
      }
    }
  }
}

// The fields are set in the table's order whatever the order given (the command line's: CLI11 runs
// the options in the order they were added), so a transform field overrides --lsh's old
// transform= item in every front end; each key is checked before any is set.
TEST(AttentionFields, FieldsApplyInTheTablesOrder) {
  std::vector<std::string> warnings;
  AttentionSpec s;
  pig::app::ApplyFields(s, Front::kRequest,
                        {{"transform", "plain"}, {"lsh", "K=8,transform=whiten:a=0.5"}}, &warnings);
  EXPECT_EQ(s.transform.str(), "plain");
  EXPECT_EQ(s.K, 8);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "pig.lsh ...,transform=whiten:a=0.5 is a deprecated spelling (accepted "
                         "for one release): write pig.transform whiten:a=0.5");
  AttentionSpec t;
  EXPECT_THROW(
      pig::app::ApplyFields(t, Front::kPython, {{"sink", std::uint64_t(2)}, {"colour", "red"}}),
      std::invalid_argument);
  EXPECT_EQ(t.sink, AttentionSpec{}.sink);
}

// A number Python gives is a number: never formatted and parsed again.
TEST(AttentionFields, PythonNumbersAreTakenAsNumbers) {
  AttentionSpec s;
  const double budget = 0.1 + 0.2; // 0.30000000000000004: %g would have lost it
  pig::app::ApplyFields(s, Front::kPython, {{"budget", budget}, {"sink", std::uint64_t(7)}});
  EXPECT_EQ(s.budget, budget);
  EXPECT_EQ(s.sink, 7u);
  try {
    pig::app::ApplyFields(s, Front::kPython, {{"budget", 1e300}});
    ADD_FAILURE();
  } catch (const std::invalid_argument &e) {
    EXPECT_STREQ(e.what(), "budget expects a number in (0, 1], got '1e+300'");
  }
}

// dense_below takes a number of positions or "measured" (AttentionSpec::kDenseBelowMeasured),
// and shows its default by name.
TEST(AttentionFields, DenseBelowTakesMeasured) {
  CommandLine cli;
  EXPECT_EQ(cli.Parse("--dense-below", "measured"), "");
  EXPECT_EQ(cli.spec.dense_below, AttentionSpec::kDenseBelowMeasured);
  EXPECT_EQ(pig::app::FieldNamed("dense_below").shown(cli.spec), "measured");
  EXPECT_EQ(cli.Parse("--dense-below", "2048"), "");
  EXPECT_EQ(cli.spec.dense_below, 2048u);
  CommandLine bad;
  EXPECT_NE(
      bad.Parse("--dense-below", "often")
          .find("--dense-below expects an integer in [0, 16777216] or 'measured', got 'often'"),
      std::string::npos)
      << bad.Parse("--dense-below", "often");
}

} // namespace
