#pragma once
// Where a process joins an elastic job that is already running (train/elastic_job.hpp): rank 0
// keeps a door open on the master's host at port master + kDoorOffset, a control plane of two
// (transport::Rendezvous: the joiner proves it holds the job's token, as every rank does), and
// the job takes in whoever waits there at its next checkpoint: rank 0 tells each its rank, the
// job's new size and the control plane of the next generation (the "assignment"), and every
// rank re-forms, re-plans onto the larger job and resumes from that checkpoint.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/rendezvous.hpp"

namespace tandem::train {

// The door's port is the master's + this: past the ports re-plans use (master + 1 to + 64).
inline constexpr int kDoorOffset = 65;

// What a joiner is told.
struct JoinAssignment {
  int generation = 0;  // the job's re-plan number: its control plane is at master + generation
  int rank = 0;
  int world_size = 0;
};

class ElasticDoor {
 public:
  // Rank 0 opens the door: a thread waits for joiners, one at a time.
  ElasticDoor(std::string host, std::uint16_t master_port, std::string job_token);
  // Closes the door; joiners not yet assigned see it closed (their join fails).
  ~ElasticDoor();
  ElasticDoor(const ElasticDoor&) = delete;
  ElasticDoor& operator=(const ElasticDoor&) = delete;

  // The joiners waiting now, claimed: they are the ones assign() later tells.
  int claim();
  // Tells the claimed joiners, in order, ranks first_rank, first_rank + 1, ..., of a job of
  // world_size at `generation`, and lets them go.
  void assign(int generation, int first_rank, int world_size);

  // A joiner: knocks at the door of the job whose master is host:master_port until it is let
  // in (or `timeout` passes) and waits there for its assignment. Throws RendezvousError naming
  // what failed (no door, the token refused).
  static JoinAssignment join(const std::string& host, std::uint16_t master_port,
                             const std::string& job_token, std::chrono::milliseconds timeout);

 private:
  void serve();

  const std::string host_;
  const std::uint16_t port_;
  const std::string token_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  std::vector<std::unique_ptr<transport::Rendezvous>> waiting_;  // joined, not claimed
  std::vector<std::unique_ptr<transport::Rendezvous>> claimed_;
  std::thread thread_;
};

}  // namespace tandem::train
