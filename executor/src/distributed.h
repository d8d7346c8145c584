// One rank's link to the other ranks of a data-parallel run (plan.h's "Data parallelism"):
// the rendezvous through c10d's TCPStore (rank 0 hosts it) and the collectives of a c10d
// process group (ProcessGroupGloo on CPU, ProcessGroupNCCL on CUDA). Only distributed.cc includes
// c10d's headers; the trainer sees at::Tensor and MemplanError only.
//
// Every failure is a MemplanError naming the rank, the address or the collective, and what to
// do: an unreachable MASTER_ADDR, a port in use, a peer that exited in the middle of a step.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "memplan/executor.h"

namespace memplan::exec {

class Communicator {
 public:
  // Rendezvous of `d.world_size` ranks at d.master_addr:d.master_port, then the process group
  // (Gloo on CPU, NCCL on cuda:LOCAL_RANK). Throws MemplanError when rank 0 cannot listen on the
  // port, when the store cannot be reached within d.timeout_seconds, or for a device the build has
  // no backend for.
  static std::unique_ptr<Communicator> Connect(const DistributedOptions& d,
                                               const std::string& device);
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;  // "gloo" or "nccl"

  // `what` names the collective in a failure ("the all-reduce of bucket 2").
  // Sums `flat` over the ranks, in place.
  virtual void AllReduceSum(at::Tensor& flat, const std::string& what) = 0;
  // shard (flat.numel() / world elements) = this rank's part of the sum of `flat` over ranks.
  // `flat` may be overwritten.
  virtual void ReduceScatterSum(at::Tensor& shard, at::Tensor& flat, const std::string& what) = 0;
  // flat = the ranks' shards, in rank order. `shard` must not alias `flat`.
  virtual void AllGather(at::Tensor& flat, at::Tensor& shard, const std::string& what) = 0;
  // Every rank's `figures` (the same count on every rank), in rank order; float64 on the wire.
  virtual std::vector<std::vector<double>> GatherFigures(const std::vector<double>& figures,
                                                         const std::string& what) = 0;
};

}  // namespace memplan::exec
