#include "planner/cluster.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "planner/detail/quantity.hpp"

namespace tandem::planner {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_cluster(yaml, "cluster.yaml");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Cluster, ParsesLevelsAndOptions) {
  const Cluster cluster = parse_cluster(
      "levels:\n"
      "  - {name: gpu, units: 8, bandwidth: 300 GB/s}\n"
      "  - {units: 16, bandwidth: 100 Gbit/s}\n"
      "memory_per_worker: 80 GiB\n"
      "sync_factor: 4\n"
      "device: cuda\n",
      "cluster.yaml");
  ASSERT_EQ(cluster.levels.size(), 2u);
  EXPECT_EQ(cluster.levels[0].name, "gpu");
  EXPECT_EQ(cluster.levels[0].units, 8);
  EXPECT_DOUBLE_EQ(cluster.levels[0].bytes_per_second, 300e9);
  EXPECT_EQ(cluster.levels[1].name, "level2");
  EXPECT_EQ(cluster.levels[1].units, 16);
  EXPECT_DOUBLE_EQ(cluster.levels[1].bytes_per_second, 12.5e9);
  EXPECT_DOUBLE_EQ(cluster.memory_per_worker_bytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(cluster.sync_factor, 4);
  EXPECT_TRUE(cluster.sync_factor_given);
  EXPECT_EQ(cluster.device, "cuda");
  EXPECT_EQ(cluster.workers(), 128);
}

TEST(Cluster, DefaultsAndBareNumbers) {
  const Cluster cluster = parse_cluster("levels: [{units: 4, bandwidth: 2.5}]", "c.yaml");
  EXPECT_DOUBLE_EQ(cluster.levels[0].bytes_per_second, 2.5e9);  // a bare number is GB/s
  EXPECT_FALSE(std::isfinite(cluster.memory_per_worker_bytes));
  EXPECT_DOUBLE_EQ(cluster.sync_factor, 2);
  EXPECT_FALSE(cluster.sync_factor_given);
  EXPECT_EQ(cluster.device, "cpu");
  EXPECT_DOUBLE_EQ(
      parse_cluster("levels: [{units: 1, bandwidth: 1}]\nmemory_per_worker: 4096", "c.yaml")
          .memory_per_worker_bytes,
      4096);
}

TEST(Cluster, ZeroBandwidthNamesLineAndKey) {
  EXPECT_EQ(error_of("levels:\n"
                     "  - {units: 8, bandwidth: 300 GB/s}\n"
                     "  - {units: 2, bandwidth: 0}\n"),
            "cluster.yaml:3: levels[1].bandwidth: must be positive, got '0'");
  EXPECT_EQ(error_of("levels:\n  - units: 2\n    bandwidth: 0 GB/s\n"),
            "cluster.yaml:3: levels[0].bandwidth: must be positive, got '0 GB/s'");
}

TEST(Cluster, MalformedValuesNameLineAndKey) {
  EXPECT_EQ(error_of("levels:\n  - {units: two, bandwidth: 1}\n"),
            "cluster.yaml:2: levels[0].units: expected an integer, got 'two'");
  EXPECT_EQ(error_of("levels:\n  - {units: 0, bandwidth: 1}\n"),
            "cluster.yaml:2: levels[0].units: must be at least 1");
  EXPECT_EQ(error_of("levels:\n  - {units: 2, bandwidth: 3 parsecs}\n"),
            "cluster.yaml:2: levels[0].bandwidth: cannot read '3 parsecs' (a number in GB/s, or "
            "e.g. '25 GB/s', '100 Gbit/s')");
  EXPECT_EQ(error_of("levels:\n  - {units: 2}\n"), "cluster.yaml:2: levels[0].bandwidth: missing");
  EXPECT_EQ(error_of("levels: []\n"), "cluster.yaml:1: levels: empty");
  EXPECT_EQ(error_of("memory_per_worker: 1 GiB\n"), "cluster.yaml:1: levels: missing");
  EXPECT_EQ(error_of("levels: [{units: 2, bandwidth: 1}]\nmemory_per_worker: -3 GiB\n"),
            "cluster.yaml:2: memory_per_worker: must be positive");
  EXPECT_EQ(error_of("levels: [{units: 2, bandwidth: 1}]\ndevice: tpu\n"),
            "cluster.yaml:2: device: expected cpu or cuda, got 'tpu'");
}

TEST(Cluster, UnknownKeysAreErrors) {
  EXPECT_EQ(error_of("levels: [{units: 2, bandwidth: 1}]\nbandwith: 3\n"),
            "cluster.yaml:2: bandwith: unknown key");
  EXPECT_EQ(error_of("levels:\n  - {units: 2, bandwidth: 1, latency: 3}\n"),
            "cluster.yaml:2: levels[0].latency: unknown key");
}

TEST(Cluster, InvalidYamlGivesLine) {
  const std::string message = error_of("levels:\n  - {units: 2, bandwidth: 1\nfoo: [\n");
  EXPECT_EQ(message.rfind("cluster.yaml:", 0), 0u) << message;
  EXPECT_NE(message.find("invalid YAML"), std::string::npos) << message;
}

TEST(Quantity, BandwidthAndBytesUnits) {
  EXPECT_DOUBLE_EQ(*detail::parse_bandwidth("800 MB/s"), 800e6);
  EXPECT_DOUBLE_EQ(*detail::parse_bandwidth("1 GiB/s"), 1073741824.0);
  EXPECT_DOUBLE_EQ(*detail::parse_bandwidth("8 bit/s"), 1.0);
  EXPECT_FALSE(detail::parse_bandwidth("fast").has_value());
  EXPECT_FALSE(detail::parse_bandwidth("").has_value());
  EXPECT_DOUBLE_EQ(*detail::parse_bytes("512 MiB"), 512.0 * 1048576.0);
  EXPECT_DOUBLE_EQ(*detail::parse_bytes("16GB"), 16e9);
  EXPECT_FALSE(detail::parse_bytes("16 GB/s").has_value());
}

}  // namespace
}  // namespace tandem::planner
