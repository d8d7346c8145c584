// Per-storage liveness facts, and the one schedule builder that reads them: the plain training
// step (no cuts), a planner's segmented step, and the step the executor carries out are all
// built here, so that when a tensor dies is decided in one place. The planner's segment cost
// tables read the same facts.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "memplan/analyzer.h"

namespace memplan {

struct GraphFacts {
  int num_nodes = 0;
  NodeId loss_node = kNone;  // the producer of the loss; cuts lie in [1, loss_node]

  // Activation storages (roots): non-view, non-persistent tensors with a producer, in TensorId
  // order.
  struct Root {
    TensorId tensor = kNone;  // the storage's own tensor
    NodeId producer = kNone;
    NodeId last_reader = kNone;   // max of the producer and every reader of any view
    NodeId first_saver = kNone;   // the earliest node whose backward reads it; kNone if none
    std::vector<NodeId> readers;  // sorted, unique; readers of the storage through any view
  };
  std::vector<Root> root;
  std::vector<int32_t> root_of;  // per tensor: index into `root` of its storage, or -1
  // The loss's storage (-1: none): held until the backward call through the loss returns
  // (GradientFlow::EndBackwardCall), by every schedule builder and the segment cost tables.
  int32_t loss_root = -1;

  std::vector<std::vector<int32_t>> produced;  // per node: indices of the roots it allocates
  std::vector<int64_t> extra_bytes;            // per node: its saved extras, in total
  // Views of parameters and constants with a producer (a class token expanded, a position table
  // sliced), in TensorId order: they own no bytes, so only Step::dropped_views names them.
  std::vector<TensorId> persistent_views;

  // The first reader of root r at or after node `from` (num_nodes if none).
  NodeId FirstReaderFrom(int32_t r, NodeId from) const;
};

GraphFacts ComputeGraphFacts(const TrainingGraph& g);

// The schedule of a step run in segments, per plan.h's execution semantics: a segment starts
// at each node in `cuts` (ascending, in [1, the loss node]; validated by the caller). No cuts:
// the plain training step (BuildTrainingSchedule).
Schedule BuildScheduleFromCuts(const TrainingGraph& g, const GraphFacts& f,
                               const std::vector<NodeId>& cuts);

// The schedule of a step with selective recompute, per plan.h's semantics: the activation
// storages in `recomputed` (root tensors: f.root[r].tensor, none produced by the loss node)
// are not saved by the forward and are recomputed, without autograd, before the backward step
// that first needs them. Empty: the plain training step. Throws MemplanError naming a tensor
// that cannot be recomputed or offloaded.
//
// Offload (plan.h): each storage in `offloaded` (a root some backward op saves, not produced by
// the loss node, not in `recomputed`) is copied to pinned host memory after its last forward
// reader and prefetched back for the backward:
//   - Forward: after the step of its last forward reader, a kOffload start step allocates its
//     host buffer and starts the device-to-host copy. After the step of node `free_after`
//     (clamped to [the last forward reader, the last node]), the kOffload wait step waits for the
//     copy and frees the device copy. Several start (then wait) steps after one node: in root
//     order.
//   - Backward, node by node in the plain step's order: before node m's backward work (its
//     recompute chain, then its backward step), a kPrefetch start step allocates the device
//     buffer ("NAME (prefetched)") and starts the host-to-device copy of every offloaded storage
//     not yet prefetched with prefetch_at >= m (by prefetch_at, descending, then in root order).
//     Right before the first step that reads the storage (a backward step saving it, or a recompute
//     step reading it), the kPrefetch wait step waits for the copy (starting it there if it was not
//     started) and frees the host buffer. The prefetched buffer then lives as a kept storage would:
//     until the backward step of its first saver, or its last read by a recompute if later.
struct OffloadChoice {
  TensorId tensor = kNone;  // the storage's root tensor
  NodeId free_after = 0;    // forward node after which the device copy is freed
  NodeId prefetch_at = 0;   // the prefetch starts before this node's backward work (see above)
};

Schedule BuildSelectiveSchedule(const TrainingGraph& g, const GraphFacts& f,
                                const std::vector<TensorId>& recomputed,
                                const std::vector<OffloadChoice>& offloaded = {},
                                bool named = true);  // Schedule::named

// BuildSelectiveSchedule for many drop sets of one graph (a planner's search replays
// thousands): what no drop set changes (the persistent, forward and saved-extra buffers, the
// gradient flow) is worked out once, and each schedule reuses the memory of the one before.
class SelectiveScheduleBuilder {
 public:
  SelectiveScheduleBuilder(const TrainingGraph& g, const GraphFacts& f, bool named = true);
  ~SelectiveScheduleBuilder();
  SelectiveScheduleBuilder(SelectiveScheduleBuilder&&) noexcept;
  SelectiveScheduleBuilder& operator=(SelectiveScheduleBuilder&&) noexcept;

  // BuildSelectiveSchedule(g, f, recomputed, offloaded, named); valid until the next call.
  const Schedule& Build(const std::vector<TensorId>& recomputed,
                        const std::vector<OffloadChoice>& offloaded = {});
  // The schedule the last Build made, moved out.
  Schedule Take();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memplan
