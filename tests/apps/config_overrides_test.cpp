// Overrides of single config keys (--set KEY=VALUE, Config::set): read as the file's own keys
// are, and every malformed or hostile override refused at the override, naming it.
#include "train/config_overrides.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "train/config.hpp"

namespace tandem::apps {
namespace {

const char* kBase = R"(model: {name: mlp, widths: [16, 32, 32, 32, 4]}
data: {kind: teacher, samples: 512, seed: 3}
train:
  minibatch: 16
  steps: 20
  optimizer: {kind: sgd, lr: 0.05}
pipeline:
  schedule: 1f1b
  slices: 4
  stages:
    - {layers: 0-1}
    - {layers: 2-3}
)";

train::Config with(std::initializer_list<train::ConfigOverride> items,
                   const std::string& text = kBase) {
  return train::parse_config(text, "base.yaml", train::ConfigOverrides{items, "--set"});
}

// The ConfigError `items` get (a failure when they load).
train::ConfigError error_of(std::initializer_list<train::ConfigOverride> items,
                            const std::string& text = kBase) {
  try {
    (void)with(items, text);
    ADD_FAILURE() << "no error";
  } catch (const train::ConfigError& e) {
    return e;
  }
  return train::ConfigError(train::ConfigLocation{}, "", "no error");
}

void expect_error(std::initializer_list<train::ConfigOverride> items, const std::string& file,
                  std::initializer_list<std::string> words) {
  const train::ConfigError e = error_of(items);
  const std::string msg = e.what();
  EXPECT_EQ(e.where().file, file) << msg;
  for (const std::string& w : words) EXPECT_NE(msg.find(w), std::string::npos) << w << ": " << msg;
}

TEST(ConfigOverrides, ReplaceAddAndIndexKeysAsTheFileWould) {
  const train::Config c = with({{"train.steps", "7"},
                                {"train.optimizer", "{kind: adamw, lr: 1e-3}"},
                                {"pipeline.stages[1].replicas", "2"},
                                {"train.clip_grad_norm", "1.5"},
                                {"cluster.stall_timeout", "12"}});
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.train.optimizer.kind, "adamw");
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 1e-3);
  ASSERT_TRUE(c.pipeline.has_value());
  EXPECT_EQ(c.pipeline->stages[1].replicas, 2);
  EXPECT_EQ(c.pipeline->stages[0].replicas, 1);
  ASSERT_TRUE(c.train.clip_grad_norm.has_value());
  EXPECT_DOUBLE_EQ(*c.train.clip_grad_norm, 1.5);
  EXPECT_DOUBLE_EQ(c.cluster.stall_timeout_s, 12);
  // Untouched keys keep the file's values, and its locations.
  EXPECT_EQ(c.train.minibatch, 16);
  EXPECT_EQ(c.where.train.file, "base.yaml");
}

TEST(ConfigOverrides, AppliedInOrderAnOverrideInsideAnEarlierOneWins) {
  const train::Config c = with(
      {{"train.optimizer", "{kind: sgd, lr: 0.5, momentum: 0.9}"}, {"train.optimizer.lr", "0.25"}});
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 0.25);
  EXPECT_DOUBLE_EQ(c.train.optimizer.momentum, 0.9);
}

TEST(ConfigOverrides, AWholeConfigFromOverridesAlone) {
  const train::Config c =
      with({{"model", "{name: mlp, widths: [4, 3]}"},
            {"data", "{kind: teacher, samples: 64}"},
            {"train", "{minibatch: 8, steps: 2, optimizer: {kind: sgd, lr: 1}}"}},
           "");
  EXPECT_EQ(c.train.steps, 2);
  EXPECT_FALSE(c.pipeline.has_value());
}

TEST(ConfigOverrides, AnInvalidValueIsReportedAtItsOverride) {
  const train::ConfigError e = error_of({{"train.steps", "-3"}});
  EXPECT_EQ(e.where().file, "--set train.steps") << e.what();
  EXPECT_EQ(e.key(), "train.steps");
  EXPECT_NE(std::string(e.what()).find("--set train.steps:1:1: train.steps"), std::string::npos)
      << e.what();
  // A value inside a list names its column in the override's text.
  const train::ConfigError widths = error_of({{"model.widths", "[16, x, 4]"}});
  EXPECT_EQ(widths.where().file, "--set model.widths") << widths.what();
  EXPECT_EQ(widths.where().column, 6) << widths.what();
  // Non-finite numbers are refused as in the file.
  expect_error({{"train.optimizer.lr", ".nan"}}, "--set train.optimizer.lr", {"expected a number"});
  expect_error({{"train.optimizer.lr", ".inf"}}, "--set train.optimizer.lr", {"expected a number"});
}

TEST(ConfigOverrides, AnUnknownKeyIsReportedAtTheOverrideThatAddedIt) {
  expect_error({{"train.stepz", "5"}}, "--set train.stepz", {"unknown key", "'steps'"});
  expect_error({{"clster.transport", "tcp"}}, "--set clster.transport", {"unknown key"});
  // A key of the file is still reported at the file.
  const train::ConfigError e =
      error_of({{"train.steps", "5"}}, std::string(kBase) + "cluster: {lanes: 2}\n");
  EXPECT_EQ(e.where().file, "base.yaml") << e.what();
  EXPECT_EQ(e.where().line, 13) << e.what();
}

TEST(ConfigOverrides, MalformedKeysAreRefusedNamingTheOverride) {
  for (const char* key : {"", ".", "train.", ".train", "train..steps", "train.steps[", "a[]",
                          "a[x]", "a[1", "a[-1]", "a[1]x", "a b", "a/b", "a=b"}) {
    expect_error({{key, "1"}}, std::string("--set ") + key, {"key"});
  }
  expect_error({{"pipeline.stages[7].replicas", "2"}}, "--set pipeline.stages[7].replicas",
               {"pipeline.stages has 2 items", "index 7"});
  expect_error({{"pipeline.stages[99999999999999999999].replicas", "2"}},
               "--set pipeline.stages[99999999999999999999].replicas", {"list index"});
  expect_error({{"train.steps.x", "1"}}, "--set train.steps.x", {"train.steps is '20'", "mapping"});
  expect_error({{"train[0]", "1"}}, "--set train[0]", {"train is a mapping, not a list"});
  expect_error({{"cluster[0]", "1"}}, "--set cluster[0]", {"no list"});
}

TEST(ConfigOverrides, AKeyGivenTwiceIsRefused) {
  expect_error({{"train.steps", "5"}, {"train.steps", "6"}}, "--set train.steps", {"twice"});
}

TEST(ConfigOverrides, HostileValuesAndSizesAreRefused) {
  const train::ConfigError syntax = error_of({{"model.widths", "[16, 32"}});
  EXPECT_EQ(syntax.where().file, "--set model.widths") << syntax.what();
  EXPECT_NE(std::string(syntax.what()).find("YAML syntax error"), std::string::npos);
  // Nesting deeper than YAML's parser allows is a syntax error, not a crash.
  expect_error({{"train.seed", std::string(100000, '[') + std::string(100000, ']')}},
               "--set train.seed", {"YAML"});
  // An alias-laden value that names far more nodes than its bytes.
  std::string bomb = "{a: &a [1, 1, 1, 1, 1, 1, 1, 1]";
  for (char c = 'b'; c <= 'k'; ++c) {
    std::string prev(1, '*');
    prev.push_back(static_cast<char>(c - 1));
    bomb.append(", ").push_back(c);
    bomb.append(": &").push_back(c);
    bomb.append(" [").append(prev).append(", ").append(prev).append(", ").append(prev);
    bomb.append(", ").append(prev).append("]");
  }
  bomb += "}";
  expect_error({{"data.extra", bomb}}, "--set data.extra", {"YAML nodes"});
  expect_error({{std::string(300, 'k'), "1"}}, "--set " + std::string(256, 'k') + "...",
               {"bytes; at most 256"});
  expect_error({{"train.seed", std::string(train::kMaxOverrideValueBytes + 1, '1')}},
               "--set train.seed", {"bytes; at most"});
  // The bounds hold for all values together: values each within them, too much in sum.
  std::vector<train::ConfigOverride> big;
  for (int i = 0; i < 3; ++i) {
    std::string key(1, 'k');
    key += std::to_string(i);
    big.push_back({key, std::string(train::kMaxOverrideValueBytes / 2, '1')});
  }
  try {
    (void)train::parse_config(kBase, "base.yaml", train::ConfigOverrides{big, "--set"});
    ADD_FAILURE() << "no error";
  } catch (const train::ConfigError& e) {
    EXPECT_EQ(e.where().file, "--set k2") << e.what();
  }
  std::vector<train::ConfigOverride> many;
  for (std::size_t i = 0; i <= train::kMaxOverrides; ++i) {
    std::string key(1, 'k');
    key += std::to_string(i);
    many.push_back({key, "1"});
  }
  try {
    (void)train::parse_config(kBase, "base.yaml", train::ConfigOverrides{many, "--set"});
    ADD_FAILURE() << "no error";
  } catch (const train::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("at most 1024"), std::string::npos) << e.what();
  }
}

TEST(ConfigOverrides, EscapeBytesInAKeyArePrintedEscaped) {
  const train::ConfigError e = error_of({{"train.\x1b[31mred", "1"}});
  const std::string msg = e.what();
  EXPECT_EQ(msg.find('\x1b'), std::string::npos) << msg;
  EXPECT_NE(msg.find("\\x1b"), std::string::npos) << msg;
}

TEST(ConfigOverrides, KeyValueTextSplitsAtTheFirstEquals) {
  const train::ConfigOverride o = train::parse_override("data.path=a=b.bin", "--set");
  EXPECT_EQ(o.key, "data.path");
  EXPECT_EQ(o.value, "a=b.bin");
  EXPECT_THROW((void)train::parse_override("train.steps", "--set"), train::ConfigError);
  const train::ConfigOverride empty = train::parse_override("train.steps=", "--set");
  EXPECT_EQ(empty.value, "");
}

}  // namespace
}  // namespace tandem::apps
