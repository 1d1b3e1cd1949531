#include "transport/launch_env.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "runtime/log.hpp"

namespace tandem::transport {
namespace {

using Vars = std::map<std::string, std::string>;

EnvLookup lookup_in(const Vars& vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// The error read_launch_env raises for `vars`; fails the test when it raises none.
std::string error_for(const Vars& vars) {
  try {
    const LaunchEnv env = read_launch_env(lookup_in(vars));
    ADD_FAILURE() << "no error; read " << env.describe();
  } catch (const LaunchEnvError& e) {
    return e.what();
  }
  return "";
}

void expect_error(const Vars& vars, std::initializer_list<std::string_view> parts) {
  const std::string message = error_for(vars);
  for (const std::string_view part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "error '" << message << "' does not mention '" << part << "'";
  }
}

TEST(LaunchEnv, NothingSetIsOneProcess) {
  const LaunchEnv env = read_launch_env(lookup_in({}));
  EXPECT_EQ(env.source, LaunchSource::kSingle);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_TRUE(env.master_host.empty());
  EXPECT_TRUE(env.job_token.empty());
}

TEST(LaunchEnv, TandemVariables) {
  const LaunchEnv env = read_launch_env(lookup_in({{"TANDEM_RANK", "2"},
                                                   {"TANDEM_WORLD_SIZE", "4"},
                                                   {"TANDEM_LOCAL_RANK", "1"},
                                                   {"TANDEM_MASTER", "127.0.0.1:29400"},
                                                   {"TANDEM_JOB_TOKEN", "s3cret"}}));
  EXPECT_EQ(env.source, LaunchSource::kTandem);
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_host, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29400);
  EXPECT_EQ(env.job_token, "s3cret");
  EXPECT_EQ(env.describe(), "rank 2 of 4 (tandem, local rank 1), master 127.0.0.1:29400");
}

TEST(LaunchEnv, TandemMasterTakesHostNamesAndBracketedV6) {
  const Vars base{{"TANDEM_RANK", "0"}, {"TANDEM_WORLD_SIZE", "2"}, {"TANDEM_JOB_TOKEN", "t"}};
  Vars named = base;
  named["TANDEM_MASTER"] = "node-01.cluster:1234";
  LaunchEnv env = read_launch_env(lookup_in(named));
  EXPECT_EQ(env.master_host, "node-01.cluster");
  EXPECT_EQ(env.master_port, 1234);
  Vars v6 = base;
  v6["TANDEM_MASTER"] = "[fd00::1]:65535";
  env = read_launch_env(lookup_in(v6));
  EXPECT_EQ(env.master_host, "fd00::1");
  EXPECT_EQ(env.master_port, 65535);
  EXPECT_EQ(env.describe(), "rank 0 of 2 (tandem, local rank 0), master [fd00::1]:65535");
}

TEST(LaunchEnv, Torchrun) {
  const LaunchEnv env = read_launch_env(lookup_in({{"RANK", "5"},
                                                   {"WORLD_SIZE", "8"},
                                                   {"LOCAL_RANK", "1"},
                                                   {"MASTER_ADDR", "10.1.2.3"},
                                                   {"MASTER_PORT", "29500"},
                                                   {"TANDEM_JOB_TOKEN", "t"}}));
  EXPECT_EQ(env.source, LaunchSource::kTorchrun);
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_host, "10.1.2.3");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(LaunchEnv, OpenMpiWithMasterAddrOrTandemMaster) {
  const Vars base{{"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                  {"MASTER_ADDR", "10.0.0.1"},
                  {"MASTER_PORT", "4000"},
                  {"TANDEM_JOB_TOKEN", "t"}};
  LaunchEnv env = read_launch_env(lookup_in(base));
  EXPECT_EQ(env.source, LaunchSource::kOpenMpi);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 3);
  EXPECT_EQ(env.master_host, "10.0.0.1");
  EXPECT_EQ(env.master_port, 4000);
  // TANDEM_MASTER wins over MASTER_ADDR/MASTER_PORT.
  Vars both = base;
  both["TANDEM_MASTER"] = "10.0.0.9:5000";
  env = read_launch_env(lookup_in(both));
  EXPECT_EQ(env.master_host, "10.0.0.9");
  EXPECT_EQ(env.master_port, 5000);
}

TEST(LaunchEnv, Slurm) {
  const LaunchEnv env = read_launch_env(lookup_in({{"SLURM_PROCID", "1"},
                                                   {"SLURM_NTASKS", "2"},
                                                   {"SLURM_LOCALID", "0"},
                                                   {"TANDEM_MASTER", "node7:29400"},
                                                   {"TANDEM_JOB_TOKEN", "t"}}));
  EXPECT_EQ(env.source, LaunchSource::kSlurm);
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.master_host, "node7");
}

TEST(LaunchEnv, NestedLaunchersTheInnerOneWins) {
  const Vars slurm{{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"MASTER_ADDR", "h"},
                   {"MASTER_PORT", "1"},
                   {"TANDEM_JOB_TOKEN", "t"}};
  Vars torch_in_slurm = slurm;
  torch_in_slurm["RANK"] = "3";
  torch_in_slurm["WORLD_SIZE"] = "4";
  EXPECT_EQ(read_launch_env(lookup_in(torch_in_slurm)).source, LaunchSource::kTorchrun);
  EXPECT_EQ(read_launch_env(lookup_in(torch_in_slurm)).rank, 3);

  Vars mpi_in_slurm = slurm;
  mpi_in_slurm["OMPI_COMM_WORLD_RANK"] = "1";
  mpi_in_slurm["OMPI_COMM_WORLD_SIZE"] = "2";
  EXPECT_EQ(read_launch_env(lookup_in(mpi_in_slurm)).source, LaunchSource::kOpenMpi);

  Vars tandem_over_all = torch_in_slurm;
  tandem_over_all["TANDEM_RANK"] = "0";
  tandem_over_all["TANDEM_WORLD_SIZE"] = "1";
  const LaunchEnv env = read_launch_env(lookup_in(tandem_over_all));
  EXPECT_EQ(env.source, LaunchSource::kTandem);
  EXPECT_EQ(env.world_size, 1);
}

TEST(LaunchEnv, NumbersAreStrict) {
  for (const char* bad : {"abc", "-1", "+1", " 3", "3 ", "3x", "", "0x10", "99999999999"}) {
    expect_error({{"RANK", bad}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
                 {"RANK='" + std::string(bad) + "'"});
  }
  expect_error({{"TANDEM_RANK", "0"}, {"TANDEM_WORLD_SIZE", "two"}},
               {"TANDEM_WORLD_SIZE='two'", "not a non-negative integer"});
  expect_error({{"TANDEM_RANK", "0"}, {"TANDEM_WORLD_SIZE", "0"}},
               {"TANDEM_WORLD_SIZE='0'", "at least one"});
}

TEST(LaunchEnv, RankMustBeBelowWorld) {
  expect_error({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
               {"OMPI_COMM_WORLD_RANK='4'", "OMPI_COMM_WORLD_SIZE='4'"});
  expect_error({{"SLURM_PROCID", "0"},
                {"SLURM_NTASKS", "2"},
                {"SLURM_LOCALID", "2"},
                {"TANDEM_MASTER", "h:1"}},
               {"SLURM_LOCALID='2'"});
}

TEST(LaunchEnv, HalfAConventionIsAnError) {
  expect_error({{"RANK", "1"}}, {"RANK='1'", "WORLD_SIZE is not"});
  expect_error({{"TANDEM_WORLD_SIZE", "2"}}, {"TANDEM_WORLD_SIZE='2'", "TANDEM_RANK is not"});
  expect_error({{"SLURM_NTASKS", "2"}}, {"SLURM_PROCID is not"});
}

TEST(LaunchEnv, MasterIsRequiredForMoreThanOneProcess) {
  expect_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}}, {"torchrun", "TANDEM_MASTER", "MASTER_ADDR"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
               {"MASTER_ADDR='h'", "MASTER_PORT is not"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "5"}},
               {"MASTER_PORT='5'", "MASTER_ADDR is not"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}},
               {"MASTER_PORT='0'", "port 0"});
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
               {"MASTER_PORT='70000'", "65535"});
  // A world of one needs none.
  EXPECT_TRUE(read_launch_env(lookup_in({{"RANK", "0"}, {"WORLD_SIZE", "1"}})).master_host.empty());
}

TEST(LaunchEnv, MalformedTandemMaster) {
  const Vars base{{"TANDEM_RANK", "0"}, {"TANDEM_WORLD_SIZE", "2"}};
  for (const char* bad : {"hostonly", ":29400", "a:b:c", "[::1]29400", "[::1", "h:port"}) {
    Vars v = base;
    v["TANDEM_MASTER"] = bad;
    expect_error(v, {"TANDEM_MASTER"});
  }
}

class LaunchEnvTokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("tandem_token_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void write(const std::string& text) { std::ofstream(path_, std::ios::binary) << text; }
  std::filesystem::path path_;
};

TEST_F(LaunchEnvTokenFile, TokenFromFileWithoutTrailingNewline) {
  write("file-token\n");
  const LaunchEnv env = read_launch_env(lookup_in({{"TANDEM_JOB_TOKEN_FILE", path_.string()}}));
  EXPECT_EQ(env.job_token, "file-token");
}

TEST_F(LaunchEnvTokenFile, EmptyMissingOrDoubleTokenIsAnError) {
  write("\n");
  expect_error({{"TANDEM_JOB_TOKEN_FILE", path_.string()}}, {path_.string(), "empty"});
  expect_error({{"TANDEM_JOB_TOKEN_FILE", path_.string() + ".absent"}},
               {"TANDEM_JOB_TOKEN_FILE", ".absent", "cannot open"});
  expect_error({{"TANDEM_JOB_TOKEN", "a"}, {"TANDEM_JOB_TOKEN_FILE", path_.string()}},
               {"both TANDEM_JOB_TOKEN and"});
  expect_error({{"TANDEM_JOB_TOKEN", ""}}, {"TANDEM_JOB_TOKEN is set but empty"});
  expect_error({{"TANDEM_JOB_TOKEN", std::string(kMaxJobTokenBytes + 1, 'x')}},
               {"TANDEM_JOB_TOKEN is longer than 4096 bytes"});
}

TEST_F(LaunchEnvTokenFile, AFileOfTheLargestSizeIsRead) {
  write(std::string(kMaxJobTokenBytes, 'k'));
  EXPECT_EQ(read_job_token(lookup_in({{"TANDEM_JOB_TOKEN_FILE", path_.string()}})),
            std::string(kMaxJobTokenBytes, 'k'));
}

// One secret given to one rank in TANDEM_JOB_TOKEN (`export T=$(cat file)` keeps no newline,
// a here-string or an env file may) and to another in the file is one token: trailing white
// space is stripped from both.
TEST_F(LaunchEnvTokenFile, OneSecretGivenEitherWayIsOneToken) {
  write("s3cret\n");
  const std::string from_file =
      read_job_token(lookup_in({{"TANDEM_JOB_TOKEN_FILE", path_.string()}}));
  for (const char* given : {"s3cret", "s3cret\n", "s3cret\r\n", "s3cret \t"}) {
    EXPECT_EQ(read_job_token(lookup_in({{"TANDEM_JOB_TOKEN", given}})), from_file) << given;
  }
  EXPECT_EQ(from_file, "s3cret");
  expect_error({{"TANDEM_JOB_TOKEN", " \n"}}, {"TANDEM_JOB_TOKEN holds only white space"});
}

// A token file others may read or write is used, with a warning naming it and the fix, as ssh
// refuses such a key; the owner's alone is read without one.
TEST_F(LaunchEnvTokenFile, AFileOthersMayReadIsWarnedAbout) {
  std::vector<std::string> warnings;
  log::set_handler([&](log::Level level, std::string_view line) {
    if (level == log::Level::warn) warnings.emplace_back(line);
  });
  write("s3cret\n");
  ASSERT_EQ(::chmod(path_.c_str(), 0644), 0);
  EXPECT_EQ(read_job_token(lookup_in({{"TANDEM_JOB_TOKEN_FILE", path_.string()}})), "s3cret");
  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  EXPECT_EQ(read_job_token(lookup_in({{"TANDEM_JOB_TOKEN_FILE", path_.string()}})), "s3cret");
  log::set_handler({});
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(path_.string()), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("mode 644"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("chmod 600"), std::string::npos) << warnings[0];
}

// /dev/zero would be read without end (4.3 GB before the bound): only a regular file of at most
// 4 KiB is a token file.
TEST_F(LaunchEnvTokenFile, OnlyASmallRegularFileIsRead) {
  expect_error({{"TANDEM_JOB_TOKEN_FILE", "/dev/zero"}}, {"/dev/zero", "not a regular file"});
  const std::string dir = std::filesystem::temp_directory_path().string();
  expect_error({{"TANDEM_JOB_TOKEN_FILE", dir}}, {dir, "not a regular file"});
  write(std::string(kMaxJobTokenBytes + 1, 'k'));
  expect_error({{"TANDEM_JOB_TOKEN_FILE", path_.string()}},
               {path_.string(), "larger than 4096 bytes"});
  write("secret\n");
  std::filesystem::permissions(path_, std::filesystem::perms::none);
  if (::access(path_.c_str(), R_OK) != 0) {  // root reads it anyway
    expect_error({{"TANDEM_JOB_TOKEN_FILE", path_.string()}}, {path_.string(), "cannot open"});
  }
}

// A FIFO is refused at once rather than waited on for a writer.
TEST_F(LaunchEnvTokenFile, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  expect_error({{"TANDEM_JOB_TOKEN_FILE", path_.string()}}, {path_.string(), "not a regular file"});
}

// The master of the job, on the launcher's variables, with or without a token.
Vars job_with_master(const std::string& master) {
  return {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", master}, {"MASTER_PORT", "29500"}};
}

TEST(LaunchEnvToken, AJobThatMaySpanHostsNeedsAToken) {
  for (const char* master : {"node0", "10.0.0.1", "fd00::1", "localhost.example.com"}) {
    expect_error(job_with_master(master), {"torchrun", master, "no job token", "TANDEM_JOB_TOKEN",
                                           "TANDEM_JOB_TOKEN_FILE", "TANDEM_ALLOW_NO_TOKEN=1"});
  }
  Vars mpi{{"OMPI_COMM_WORLD_RANK", "0"},
           {"OMPI_COMM_WORLD_SIZE", "4"},
           {"TANDEM_MASTER", "node0:1234"}};
  expect_error(mpi, {"Open MPI launch of 4 processes", "node0"});
  mpi["TANDEM_JOB_TOKEN"] = "t";
  EXPECT_EQ(read_launch_env(lookup_in(mpi)).job_token, "t");
}

TEST(LaunchEnvToken, ALoopbackMasterOrOneProcessNeedsNone) {
  for (const char* master : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"}) {
    const LaunchEnv env = read_launch_env(lookup_in(job_with_master(master)));
    EXPECT_EQ(env.master_host, master);
    EXPECT_TRUE(env.job_token.empty());
  }
  Vars one = job_with_master("node0");
  one["RANK"] = "0";
  one["WORLD_SIZE"] = "1";
  EXPECT_NO_THROW(read_launch_env(lookup_in(one)));
}

TEST(LaunchEnvToken, TheOptOutIsExplicit) {
  Vars v = job_with_master("node0");
  v["TANDEM_ALLOW_NO_TOKEN"] = "1";
  EXPECT_TRUE(read_launch_env(lookup_in(v)).job_token.empty());
  v["TANDEM_ALLOW_NO_TOKEN"] = "0";
  expect_error(v, {"no job token"});
  for (const char* bad : {"yes", "true", "", "2"}) {
    v["TANDEM_ALLOW_NO_TOKEN"] = bad;
    expect_error(v, {"TANDEM_ALLOW_NO_TOKEN='" + std::string(bad) + "'", "not 0 or 1"});
  }
}

TEST(LaunchEnvToken, LoopbackHostsAreReadAsWritten) {
  for (const char* host : {"localhost", "127.0.0.1", "127.255.0.9", "::1", "::ffff:127.0.0.2"}) {
    EXPECT_TRUE(is_loopback_host(host)) << host;
  }
  for (const char* host : {"node0", "10.0.0.1", "0.0.0.0", "::", "fe80::1", "::ffff:10.0.0.1",
                           "localhost.", "128.0.0.1", ""}) {
    EXPECT_FALSE(is_loopback_host(host)) << host;
  }
}

}  // namespace
}  // namespace tandem::transport
