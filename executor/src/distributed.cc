// The rendezvous (c10d TCPStore) and the collectives (ProcessGroupGloo on CPU, ProcessGroupNCCL
// on CUDA) of a data-parallel rank. The only translation unit that includes c10d's headers
// (compiled with USE_C10D_GLOO, and USE_C10D_NCCL when the LibTorch has CUDA).
#include "distributed.h"

#include <c10/util/Logging.h>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef MEMPLAN_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "memplan/analyzer.h"
#include "memplan/parse.h"
#include "torch_compat.h"

namespace memplan {

namespace {

std::string FirstLine(const std::string& what) {
  std::string line = what.substr(0, what.find('\n'));
  return line.empty() ? "unknown error" : line;
}

// c10::Error carries a backtrace after its message.
std::string Message(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e))
    return FirstLine(c->what_without_backtrace());
  return FirstLine(e.what());
}

int64_t EnvInt(const char* name, int64_t lo, int64_t hi, bool required, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    if (required) {
      throw MemplanError(
          std::string(
              "WORLD_SIZE is set, so this memplan is one rank of a data-parallel run, but ") +
          name +
          " is not set; a launcher (torchrun, srun, memplan run --nproc) sets RANK, WORLD_SIZE, "
          "LOCAL_RANK, MASTER_ADDR and MASTER_PORT");
    }
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || errno != 0 || x < lo || x > hi) {
    throw MemplanError(std::string(name) + "='" + PrintableText(v) +
                       "' is not a whole number from " + std::to_string(lo) + " to " +
                       std::to_string(hi));
  }
  return x;
}

}  // namespace

DistributedOptions DistributedFromEnvironment() {
  DistributedOptions d;
  const char* world = std::getenv("WORLD_SIZE");
  if (!world || !*world) return d;
  d.world_size = EnvInt("WORLD_SIZE", 1, 1 << 20, true, 1);
  d.rank = EnvInt("RANK", 0, d.world_size - 1, true, 0);
  d.local_rank = EnvInt("LOCAL_RANK", 0, d.world_size - 1, false, d.rank);
  if (d.world_size > 1) {
    const char* addr = std::getenv("MASTER_ADDR");
    if (!addr || !*addr) {
      throw MemplanError("WORLD_SIZE is " + std::to_string(d.world_size) +
                         " but MASTER_ADDR is not set: set it to rank 0's host name or address "
                         "(127.0.0.1 on one machine)");
    }
    d.master_addr = addr;
    d.master_port = EnvInt("MASTER_PORT", 1, 65535, true, 0);
  }
  return d;
}

namespace exec {
namespace {

using std::chrono::milliseconds;

// While alive, c10 (and c10d) log only fatal messages.
class QuietC10Logging {
 public:
  QuietC10Logging() : saved_(FLAGS_caffe2_log_level) {
    FLAGS_caffe2_log_level = std::max(saved_, 3);
  }
  ~QuietC10Logging() { FLAGS_caffe2_log_level = saved_; }
  QuietC10Logging(const QuietC10Logging&) = delete;
  QuietC10Logging& operator=(const QuietC10Logging&) = delete;

 private:
  int saved_;
};

// One rank of a c10d process group: Gloo on the CPU, NCCL on CUDA devices. The collectives are
// the same calls on either backend (c10d::Backend).
class ProcessGroupCommunicator final : public Communicator {
 public:
  // `cuda_index` >= 0: NCCL on that device; -1: Gloo on the CPU.
  ProcessGroupCommunicator(const DistributedOptions& d, int64_t cuda_index)
      : d_(d), backend_(cuda_index >= 0 ? "nccl" : "gloo") {
    const bool cuda = cuda_index >= 0;
    const milliseconds timeout(static_cast<int64_t>(d.timeout_seconds * 1000));
    const std::string where = d.master_addr + ":" + std::to_string(d.master_port);
    const std::string rank = "rank " + std::to_string(d.rank);
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(d.master_port);
    o.isServer = d.rank == 0;
    o.numWorkers = static_cast<size_t>(d.world_size);
    o.waitWorkers = true;
    o.timeout = timeout;
    try {
      // c10d logs every connection retry with a C++ backtrace; the one message that matters is
      // the MemplanError below.
      QuietC10Logging quiet;
      store_ = c10::make_intrusive<c10d::TCPStore>(d.master_addr, o);
    } catch (const std::exception& e) {
      const std::string m = Message(e);
      if (d.rank == 0 && m.find("listen") != std::string::npos) {
        throw MemplanError(
            rank + ": cannot host the rendezvous on " + where + ": " + m +
            "; the port is probably in use (another run?): choose a free MASTER_PORT, and set "
            "MASTER_ADDR to an address of this host");
      }
      throw MemplanError(
          rank + ": the rendezvous at " + where + " failed within " + Seconds(d) + ": " + m +
          "; check that MASTER_ADDR and MASTER_PORT name rank 0's host and port, that rank 0 is "
          "running, and that all " +
          std::to_string(d.world_size) + " ranks were started");
    }
    if (cuda) {
      ConnectNccl(d, cuda_index, timeout, where);
      return;
    }
    try {
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      if (ifname && *ifname) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else if (d.master_addr == "127.0.0.1" || d.master_addr == "localhost") {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, static_cast<int>(d.rank),
                                                        static_cast<int>(d.world_size), opts);
    } catch (const std::exception& e) {
      throw MemplanError(rank + ": connecting the " + std::to_string(d.world_size) +
                         " ranks (Gloo, rendezvous at " + where + ") failed within " + Seconds(d) +
                         ": " + Message(e) +
                         " (another rank has probably exited; see its message)");
    }
  }

  int rank() const override { return static_cast<int>(d_.rank); }
  int world_size() const override { return static_cast<int>(d_.world_size); }
  std::string backend() const override { return backend_; }

  void AllReduceSum(at::Tensor& flat, const std::string& what) override {
    // The work object keeps its tensors until Gloo's worker thread lets go of it, which can be
    // after wait() returns: it gets an alias that does not own the memory, so that a flat
    // gradient freed after its collective is freed then (the meter sees the free where plan.h
    // puts it).
    std::vector<at::Tensor> t = {
        at::from_blob(flat.data_ptr(), flat.sizes(), flat.strides(), flat.options())};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    Wait([&] { return pg_->allreduce(t, o); }, what);
  }

  // ProcessGroupGloo's reduce_scatter_single and all_gather_single each copy through a
  // temporary of the whole flat buffer (measured with the counting allocator: P_b + 12 bytes and
  // P_b), which plan.h's memory model does not have. Both are therefore an in-place all-reduce
  // (measured: no allocation through LibTorch's allocator; Gloo's own scratch is malloc'd), at
  // twice the bytes on the wire.
  void ReduceScatterSum(at::Tensor& shard, at::Tensor& flat, const std::string& what) override {
    AllReduceSum(flat, what);
    shard.copy_(flat.narrow(0, d_.rank * shard.numel(), shard.numel()));
  }

  // Every rank zeroes the others' parts and the sum is the gather (x + 0 is x exactly).
  void AllGather(at::Tensor& flat, at::Tensor& shard, const std::string& what) override {
    const int64_t s = shard.numel();
    flat.zero_();
    flat.narrow(0, d_.rank * s, s).copy_(shard);
    AllReduceSum(flat, what);
  }

  std::vector<std::vector<double>> GatherFigures(const std::vector<double>& figures,
                                                 const std::string& what) override {
    const int64_t n = static_cast<int64_t>(figures.size());
    // NCCL gathers device memory; the figures travel there and back.
    const at::TensorOptions o = at::TensorOptions().dtype(at::kDouble).device(device_);
    at::Tensor mine =
        at::from_blob(const_cast<double*>(figures.data()), {n}, at::kDouble).to(device_).clone();
    at::Tensor all = at::zeros({n * d_.world_size}, o);
    Wait([&] { return torch_compat::AllGatherSingle(*pg_, all, mine); }, what);
    all = all.to(at::kCPU);
    std::vector<std::vector<double>> out(static_cast<size_t>(d_.world_size));
    const double* p = all.data_ptr<double>();
    for (int64_t r = 0; r < d_.world_size; ++r) out[r].assign(p + r * n, p + (r + 1) * n);
    return out;
  }

 private:
  static std::string Seconds(const DistributedOptions& d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g s", d.timeout_seconds);
    return buf;
  }

  template <class Start>
  void Wait(Start start, const std::string& what) {
    try {
      c10::intrusive_ptr<c10d::Work> work = start();
      work->wait();
    } catch (const std::exception& e) {
      throw MemplanError("rank " + std::to_string(d_.rank) + ": " + what + " failed: " +
                         Message(e) + " (another rank has probably exited; see its message)");
    }
  }

#ifdef MEMPLAN_TORCH_CUDA
  void ConnectNccl(const DistributedOptions& d, int64_t index, std::chrono::milliseconds timeout,
                   const std::string& where) {
    const std::string rank = "rank " + std::to_string(d.rank);
    const int64_t visible = c10::cuda::device_count();
    if (visible == 0) {
      throw MemplanError(
          rank +
          ": --device cuda needs a CUDA device for NCCL, and none is visible "
          "(nvidia-smi; CUDA_VISIBLE_DEVICES); run the ranks with --device cpu (Gloo)");
    }
    if (index >= visible) {
      throw MemplanError(rank + ": cuda:" + std::to_string(index) + " (LOCAL_RANK " +
                         std::to_string(d.local_rank) + ") is not a device here (" +
                         std::to_string(visible) +
                         " visible): start at most one rank per device on each host");
    }
    device_ = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
    try {
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, static_cast<int>(d.rank),
                                                        static_cast<int>(d.world_size), opts);
    } catch (const std::exception& e) {
      throw MemplanError(rank + ": connecting the " + std::to_string(d.world_size) +
                         " ranks (NCCL, rendezvous at " + where + ") failed within " + Seconds(d) +
                         ": " + Message(e) +
                         " (another rank has probably exited; see its message)");
    }
  }
#else
  void ConnectNccl(const DistributedOptions& d, int64_t, std::chrono::milliseconds,
                   const std::string&) {
    throw MemplanError("rank " + std::to_string(d.rank) +
                       ": this memplan's LibTorch has no CUDA, so no NCCL: run the ranks with "
                       "--device cpu (Gloo)");
  }
#endif

  DistributedOptions d_;
  std::string backend_;
  c10::Device device_ = c10::Device(c10::kCPU);
  c10::intrusive_ptr<c10d::TCPStore> store_;
  c10::intrusive_ptr<c10d::Backend> pg_;
};

}  // namespace

std::unique_ptr<Communicator> Communicator::Connect(const DistributedOptions& d,
                                                    const std::string& device) {
  // A rank on "cuda" runs on cuda:LOCAL_RANK (RunTraining resolves it, as torchrun users expect).
  int64_t index = -1;
  if (device == "cuda")
    index = d.local_rank;
  else if (device.rfind("cuda:", 0) == 0)
    index = std::atoll(device.c_str() + 5);
  else if (device != "cpu")
    throw MemplanError("--device " + device +
                       ": data-parallel ranks run on cpu (Gloo) or cuda (NCCL)");
  if (!(d.timeout_seconds > 0))
    throw MemplanError("--timeout must be a positive number of seconds");
  return std::make_unique<ProcessGroupCommunicator>(d, index);
}

}  // namespace exec
}  // namespace memplan
