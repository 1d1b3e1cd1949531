#pragma once
// Where a process joins an elastic job that is already running (train/elastic_job.hpp): rank 0
// keeps a door open on the master's host at a port of its own (logged at the start), a control
// plane of two
// (transport::Rendezvous: the joiner proves it holds the job's token, as every rank does), and
// the job takes in whoever waits there at its next checkpoint: rank 0 tells each its rank, the
// job's new size and the control plane of the next generation (the "assignment"), and every
// rank re-forms, re-plans onto the larger job and resumes from that checkpoint. Before it waits,
// a joiner compares its job with the job's (train/job_agreement.hpp, joiner_description): one
// that differs (another model, steps, optimizer, checkpoint interval) is refused at the door
// with the first line that differs, and the job goes on without it.
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

// What a joiner is told.
struct JoinAssignment {
  int generation = 0;      // the job's re-plan number
  std::uint16_t port = 0;  // where that generation's control plane listens (the master's host)
  int rank = 0;
  int world_size = 0;
};

class ElasticDoor {
 public:
  // Rank 0 opens the door on a free port of `host`: a thread waits for joiners, one at a time,
  // and takes in those whose description equals `job`. Throws transport::RendezvousError when
  // it cannot listen.
  ElasticDoor(std::string host, std::string job_token, std::vector<std::string> job);
  // Closes the door; joiners not yet assigned see it closed (their join fails).
  ~ElasticDoor();
  ElasticDoor(const ElasticDoor&) = delete;
  ElasticDoor& operator=(const ElasticDoor&) = delete;

  // The joiners waiting now, claimed: they are the ones assign() later tells. One that left
  // since it was let in (its connection closed, or silent past the heartbeat timeout) is
  // dropped with a warning.
  int claim();
  // Where joiners knock (on the host given).
  std::uint16_t port() const { return port_; }

  // Tells the claimed joiners, in order, ranks first_rank, first_rank + 1, ..., of a job of
  // world_size at `generation`, whose control plane listens at `port`, and lets them go.
  void assign(int generation, std::uint16_t port, int first_rank, int world_size);

  // A joiner: knocks at the door at host:port until it is let in (or `timeout` passes), shows
  // its description `mine`, and waits there for its assignment. Throws RendezvousError naming
  // what failed (no door, the token refused), JobError when its job differs from the job's
  // (naming the first line that does, both values).
  static JoinAssignment join(const std::string& host, std::uint16_t port,
                             const std::string& job_token, std::chrono::milliseconds timeout,
                             const std::vector<std::string>& mine);

 private:
  void serve();

  const std::string host_;
  const std::string token_;
  const std::vector<std::string> job_;
  std::uint16_t port_ = 0;
  std::unique_ptr<transport::Rendezvous> first_;  // the door opened by the constructor
  std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  std::vector<std::unique_ptr<transport::Rendezvous>> waiting_;  // joined, not claimed
  std::vector<std::unique_ptr<transport::Rendezvous>> claimed_;
  std::thread thread_;
};

}  // namespace tandem::train
