#include "planner/profile.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

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

}  // namespace
}  // namespace tandem::planner
