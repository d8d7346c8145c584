// Per-storage liveness facts shared by the segmented schedule builder and the planner's
// segment cost tables, so that both read the same rules.
#pragma once

#include <cstdint>
#include <vector>

#include "memplan/analyzer.h"

namespace memplan::planner {

struct GraphFacts {
  int num_nodes = 0;
  NodeId loss_node = kNone;  // the producer of the loss; cuts lie in [1, loss_node]

  // Activation storages: non-view, non-persistent tensors with a producer, in TensorId order.
  std::vector<TensorId> roots;
  std::vector<int32_t> root_of;  // per tensor: index into `roots` of its storage, or -1
  struct Root {
    TensorId tensor = kNone;
    NodeId producer = kNone;
    NodeId last_reader = kNone;   // max of the producer and every reader of any view
    NodeId first_saver = kNone;   // the earliest node whose backward reads it; kNone if none
    std::vector<NodeId> readers;  // sorted, unique; readers of the storage through any view
  };
  std::vector<Root> root;  // parallel to `roots`

  std::vector<std::vector<int32_t>> produced;  // per node: indices of the roots it allocates
  std::vector<int64_t> extra_bytes;            // per node: its saved extras, in total

  // The first reader of root r at or after node `from` (num_nodes if none).
  NodeId FirstReaderFrom(int32_t r, NodeId from) const;
};

GraphFacts ComputeGraphFacts(const TrainingGraph& g);

}  // namespace memplan::planner
