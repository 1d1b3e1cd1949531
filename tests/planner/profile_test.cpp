#include "planner/profile.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::planner {
namespace {

using nlohmann::json;

json two_layers() {
  return json::parse(R"({
    "model": "mlp", "device": "cpu", "minibatch": 32,
    "layers": [
      {"name": "fc1", "forward_ms": 1.5, "backward_ms": 3, "backward_weight_ms": 1.25,
       "activation_bytes": 4096, "parameter_bytes": 1024, "memory_bytes": 8192},
      {"forward_ms": 0.5, "backward_ms": 1, "backward_weight_ms": 0,
       "activation_bytes": 16, "parameter_bytes": 0, "memory_bytes": 0,
       "forward_fixed_ms": 0.25, "backward_fixed_ms": 0.5, "step_ms": 0.125}
    ], "concurrent": 2})");
}

// The message of the error parse_profile throws, or "" when it does not throw.
std::string error_of(const json& root) {
  try {
    parse_profile(root, "profile.json");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Profile, ParsesEveryField) {
  const Profile profile = parse_profile(two_layers(), "profile.json");
  EXPECT_EQ(profile.model, "mlp");
  EXPECT_EQ(profile.device, "cpu");
  EXPECT_EQ(profile.minibatch, 32);
  ASSERT_EQ(profile.layers.size(), 2u);
  EXPECT_EQ(profile.layers[0].name, "fc1");
  EXPECT_DOUBLE_EQ(profile.layers[0].forward_ms, 1.5);
  EXPECT_DOUBLE_EQ(profile.layers[0].backward_ms, 3);
  EXPECT_DOUBLE_EQ(profile.layers[0].backward_weight_ms, 1.25);
  EXPECT_DOUBLE_EQ(profile.layers[0].activation_bytes, 4096);
  EXPECT_DOUBLE_EQ(profile.layers[0].parameter_bytes, 1024);
  EXPECT_DOUBLE_EQ(profile.layers[0].memory_bytes, 8192);
  EXPECT_DOUBLE_EQ(profile.layers[0].forward_fixed_ms, 0);
  EXPECT_DOUBLE_EQ(profile.layers[1].forward_fixed_ms, 0.25);
  EXPECT_DOUBLE_EQ(profile.layers[1].backward_fixed_ms, 0.5);
  EXPECT_DOUBLE_EQ(profile.layers[0].step_ms, 0);
  EXPECT_DOUBLE_EQ(profile.layers[1].step_ms, 0.125);
  EXPECT_EQ(profile.concurrent, 2);
}

TEST(Profile, ConcurrentCopiesAreACountFromOne) {
  json root = two_layers();
  root.erase("concurrent");
  EXPECT_EQ(parse_profile(root, "profile.json").concurrent, 1);
  root["concurrent"] = 0;
  EXPECT_NE(error_of(root).find("concurrent: must be in 1..4096"), std::string::npos)
      << error_of(root);
  root["concurrent"] = 1.5;
  EXPECT_NE(error_of(root).find("concurrent: expected an integer"), std::string::npos)
      << error_of(root);
  root = two_layers();
  root["layers"][0]["step_ms"] = -1;
  EXPECT_NE(error_of(root).find("layers[0].step_ms: negative"), std::string::npos)
      << error_of(root);
}

TEST(Profile, MissingFieldNamesFileAndField) {
  json root = two_layers();
  root["layers"][1].erase("memory_bytes");
  EXPECT_EQ(error_of(root), "profile.json: layers[1].memory_bytes: missing");
  root = two_layers();
  root.erase("minibatch");
  EXPECT_EQ(error_of(root), "profile.json: minibatch: missing");
  root = two_layers();
  root.erase("layers");
  EXPECT_EQ(error_of(root), "profile.json: layers: missing");
}

TEST(Profile, NegativeTimeNamesTheLayer) {
  json root = two_layers();
  root["layers"][1]["forward_ms"] = -1.5;
  EXPECT_EQ(error_of(root), "profile.json: layers[1].forward_ms: negative (-1.5)");
  root = two_layers();
  root["layers"][0]["activation_bytes"] = -4;
  EXPECT_EQ(error_of(root), "profile.json: layers[0].activation_bytes: negative (-4)");
}

TEST(Profile, NonNumbersAreRejected) {
  json root = two_layers();
  root["layers"][0]["backward_ms"] = "3";
  EXPECT_EQ(error_of(root), "profile.json: layers[0].backward_ms: expected a number, got string");
  root = two_layers();
  root["layers"][0]["parameter_bytes"] = nullptr;
  EXPECT_EQ(error_of(root), "profile.json: layers[0].parameter_bytes: expected a number, got null");
  root = two_layers();
  root["minibatch"] = 2.5;
  EXPECT_EQ(error_of(root), "profile.json: minibatch: expected an integer, got number");
  root = two_layers();
  root["layers"][0] = 7;
  EXPECT_EQ(error_of(root), "profile.json: layers[0]: expected an object, got number");
}

TEST(Profile, InconsistentPartsAndUnknownFieldsAreRejected) {
  json root = two_layers();
  root["layers"][0]["backward_weight_ms"] = 3.5;
  EXPECT_EQ(error_of(root), "profile.json: layers[0].backward_weight_ms: exceeds backward_ms");
  root = two_layers();
  root["layers"][1]["forward_fixed_ms"] = 0.75;
  EXPECT_EQ(error_of(root), "profile.json: layers[1].forward_fixed_ms: exceeds forward_ms");
  root = two_layers();
  root["layers"][0]["forward"] = 1;
  EXPECT_EQ(error_of(root), "profile.json: layers[0].forward: unknown field");
  root = two_layers();
  root["layers"] = json::array();
  EXPECT_EQ(error_of(root), "profile.json: layers: empty");
  root = two_layers();
  root["minibatch"] = 0;
  EXPECT_EQ(error_of(root), "profile.json: minibatch: must be positive");
}

TEST(Profile, InvalidJsonGivesPosition) {
  try {
    parse_profile_text("{\"minibatch\": 3,, }", "bad.json");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("bad.json: invalid JSON: ", 0), 0u) << message;
    EXPECT_NE(message.find("line 1, column 17"), std::string::npos) << message;
  }
}

TEST(Profile, SaveThenLoadRoundTrips) {
  const Profile original = parse_profile(two_layers(), "profile.json");
  const auto path = std::filesystem::temp_directory_path() /
                    ("tandem_profile_" +
                     std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".json");
  save_profile(original, path);
  const Profile loaded = load_profile(path);
  std::filesystem::remove(path);
  EXPECT_EQ(profile_to_json(loaded), profile_to_json(original));
  EXPECT_EQ(loaded.layers[1].name, "");
  EXPECT_DOUBLE_EQ(loaded.layers[1].backward_fixed_ms, 0.5);
  EXPECT_DOUBLE_EQ(loaded.layers[1].step_ms, 0.125);
  EXPECT_EQ(loaded.concurrent, 2);
}

TEST(Profile, SaveRejectsWhatLoadWouldReject) {
  Profile profile = parse_profile(two_layers(), "profile.json");
  profile.layers[0].forward_ms = -1;
  const auto path = std::filesystem::temp_directory_path() / "tandem_profile_bad.json";
  EXPECT_THROW(save_profile(profile, path), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Profile, MissingFileIsAnError) {
  try {
    load_profile("/nonexistent/profile.json");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/profile.json: cannot open profile");
  }
}

// A graph of three layers: layer 2 reads layer 1 and, over a skip, layer 0 and the model input.
json skip_graph() {
  json root = two_layers();
  root["input_bytes"] = 64;
  root["layers"].push_back({{"forward_ms", 1},
                            {"backward_ms", 2},
                            {"backward_weight_ms", 0},
                            {"activation_bytes", 32},
                            {"parameter_bytes", 0},
                            {"memory_bytes", 0},
                            {"inputs", {-1, 0, 1}}});
  return root;
}

TEST(Profile, ReadsAGraphsEdges) {
  const Profile profile = parse_profile(skip_graph(), "profile.json");
  ASSERT_EQ(profile.layers.size(), 3u);
  EXPECT_TRUE(profile.layers[0].inputs.empty());
  EXPECT_EQ(profile.layers[2].inputs, (std::vector<int>{kProfileModelInput, 0, 1}));
  EXPECT_DOUBLE_EQ(profile.input_bytes, 64);
  EXPECT_TRUE(is_graph(profile));
  const Profile again = parse_profile(profile_to_json(profile), "again");
  EXPECT_EQ(again.layers[2].inputs, profile.layers[2].inputs);
  EXPECT_DOUBLE_EQ(again.input_bytes, 64);
}

TEST(Profile, AChainIsWrittenAsBefore) {
  // No edges and no input size on disk: chain profiles stay byte for byte what they were.
  const Profile chain = parse_profile(two_layers(), "profile.json");
  EXPECT_FALSE(is_graph(chain));
  const json written = profile_to_json(chain);
  EXPECT_FALSE(written.contains("input_bytes"));
  for (const json& layer : written.at("layers")) EXPECT_FALSE(layer.contains("inputs"));
}

TEST(Profile, RejectsHostileEdges) {
  const auto with_inputs = [](json inputs) {
    json root = skip_graph();
    root["layers"][2]["inputs"] = std::move(inputs);
    return error_of(root);
  };
  EXPECT_EQ(with_inputs({3}),
            "profile.json: layers[2].inputs[0]: 3 is not an earlier layer (a profile lists a "
            "graph in topological order)");
  EXPECT_EQ(with_inputs({2}), "profile.json: layers[2].inputs[0]: the layer reads itself");
  EXPECT_EQ(with_inputs({0, 0}),
            "profile.json: layers[2].inputs[1]: duplicate of the entry before");
  EXPECT_EQ(with_inputs({1, 0}),
            "profile.json: layers[2].inputs[1]: not ascending (list each input once, in order)");
  EXPECT_EQ(with_inputs({-2}),
            "profile.json: layers[2].inputs[0]: -2 is no layer (-1: the model "
            "input)");
  EXPECT_EQ(with_inputs({-1, 0, 1, 1}),
            "profile.json: layers[2].inputs: 4 entries, more than the 3 earlier layers and "
            "model input");
  EXPECT_EQ(with_inputs(json::array()),
            "profile.json: layers[2].inputs: empty (omit the field to read the previous layer)");
  EXPECT_EQ(with_inputs({0.5}),
            "profile.json: layers[2].inputs[0]: expected an integer, got number");
  EXPECT_EQ(with_inputs("0"), "profile.json: layers[2].inputs: expected an array, got string");
  EXPECT_EQ(with_inputs({9223372036854775807LL}),
            "profile.json: layers[2].inputs[0]: 9223372036854775807 is not an earlier layer (a "
            "profile lists a graph in topological order)");
  json huge = skip_graph();
  huge["layers"][2]["inputs"] = json::array();
  for (int i = 0; i < 100000; ++i) huge["layers"][2]["inputs"].push_back(0);
  EXPECT_EQ(error_of(huge),
            "profile.json: layers[2].inputs: 100000 entries, more than the 3 earlier layers and "
            "model input");
  json negative = skip_graph();
  negative["input_bytes"] = -1;
  EXPECT_EQ(error_of(negative), "profile.json: input_bytes: negative (-1)");
}

}  // namespace
}  // namespace tandem::planner
