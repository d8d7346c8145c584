// The compare page's tables: quantities of two items side by side, which checkpoints each
// plan keeps, and, for two profiles, the time of every node in each.
#pragma once

#include <string>

#include "loader.h"
#include "table_model.h"

namespace memplan::gui {

enum class CompareQuantity {
  kPredictedPeak,  // the plan's peak, else the timeline's, else the baseline
  kMeasuredPeak,
  kBudget,
  kBaselinePeak,
  kOverhead,
  kCheckpoints,
  kStrategy,
  kScheduleSteps,
  // Runs and profiles (the rows appear when either item has a measured step time).
  kStepTime,
  kRecomputeTime,
  // Profiles: Profile::PhaseSeconds, PredictedRecomputeSeconds, the caching allocator's peak.
  kForwardTime,
  kLossTime,
  kBackwardTime,
  kOptimizerTime,
  kPredictedRecomputeTime,
  kCudaReservedPeak,
  // GPUs: the reserved peak a prediction gives (the caching allocator model), and the device
  // memory a CUPTI profile saw. Each kind of memory is a row of its own.
  kPredictedReservedPeak,
  kDeviceMemoryPeak,
};

class CompareModel : public RowTableModel<CompareQuantity> {
 public:
  enum Column { kQuantity, kA, kB, kDelta, kColumnCount };
  explicit CompareModel(QObject* parent = nullptr);
  // The plan quantities when either item is not a profile (two profiles: their measured peak
  // only; no rows when both are null), the measured times when either has a step time, the
  // per-phase times when either is a profile.
  void setItems(ItemPtr a, ItemPtr b);

 protected:
  Cell cell(const CompareQuantity& row, int column) const override;

 private:
  ItemPtr a_, b_;
};

struct KeptRow {
  enum class KeptBy { kAOnly, kBOnly, kBoth };
  std::string tensor;
  KeptBy kept_by = KeptBy::kBoth;
};

class KeptModel : public RowTableModel<KeptRow> {
 public:
  enum Column { kTensor, kKeptBy, kColumnCount };
  explicit KeptModel(QObject* parent = nullptr);
  // A's checkpoints that B lacks, then B's that A lacks, then those in both; none unless both are
  // set.
  void setItems(const ItemPtr& a, const ItemPtr& b);

 protected:
  Cell cell(const KeptRow& row, int column) const override;
};

}  // namespace memplan::gui

namespace memplan::gui {

// One node (or phase-level scope) in two profiles. Nodes match by (phase, node): a node runs in
// one segment per plan, and two plans of a model may cut it into different segments.
// Phase-level rows match by (phase, segment).
struct NodeTimeDiffRow {
  Phase phase = Phase::kForward;
  NodeId node = kNone;
  int32_t segment = 0;  // A's, else B's
  std::string name, op;
  double a = -1, b = -1;  // MeasuredSeconds in each profile; -1: not in it
};

std::vector<NodeTimeDiffRow> NodeTimeDiffRows(const Profile& a, const Profile& b);

class NodeTimeDiffModel : public RowTableModel<NodeTimeDiffRow> {
 public:
  enum Column { kNode, kOp, kPhase, kA, kB, kDelta, kRatio, kColumnCount };
  explicit NodeTimeDiffModel(QObject* parent = nullptr);
  // No rows unless both items are profiles.
  void setItems(const ItemPtr& a, const ItemPtr& b);

 protected:
  Cell cell(const NodeTimeDiffRow& row, int column) const override;
};

}  // namespace memplan::gui
