// The time page's tables: per node (and phase, segment) measured time against the cost
// model's prediction, and recompute time per segment. Every number is the profile's own:
// NodeProfile's seconds (device_seconds on CUDA) and predicted_seconds, and Profile's
// RecomputeSeconds / PredictedRecomputeSeconds per segment. "Difference" is measured minus
// predicted, "Ratio" measured over predicted; both "—" where the prediction is unknown (0).
#pragma once

#include <memory>

#include "document.h"
#include "table_model.h"

namespace memplan::gui {

struct NodeTimeRow {
  NodeProfile node;
  double measured = 0;  // MeasuredSeconds(profile, node)
  bool device = false;  // measured is the CUPTI kernel time
};

// One row per NodeProfile of the profile, in its order (phase, segment, node); the phase-level
// rows (node kNone: the autograd engine between backward functions, input slicing, the
// optimizer) included. Sort through a proxy with Qt::UserRole.
class NodeTimeModel : public RowTableModel<NodeTimeRow> {
 public:
  enum Column {
    kNode,
    kOp,
    kPhase,
    kSegment,
    kCalls,
    kMeasured,
    kPredicted,
    kDifference,
    kRatio,
    kColumnCount
  };
  explicit NodeTimeModel(QObject* parent = nullptr);
  void setProfile(const std::shared_ptr<const Profile>& profile);

 protected:
  Cell cell(const NodeTimeRow& row, int column) const override;
};

struct RecomputeTimeRow {
  int32_t segment = -1;  // -1: all segments
  double measured = 0;   // Profile::RecomputeSeconds(segment)
  double predicted = 0;  // Profile::PredictedRecomputeSeconds(segment); 0: unknown
};

// The segments that recompute, in order, then the total.
std::vector<RecomputeTimeRow> RecomputeTimeRows(const Profile& profile);

class RecomputeTimeModel : public RowTableModel<RecomputeTimeRow> {
 public:
  enum Column { kSegment, kMeasured, kPredicted, kDifference, kRatio, kColumnCount };
  explicit RecomputeTimeModel(QObject* parent = nullptr);
  void setProfile(const std::shared_ptr<const Profile>& profile);

 protected:
  Cell cell(const RecomputeTimeRow& row, int column) const override;
};

// "backward Conv /layer1/conv1", or "backward (phase, segment 1)" for a phase-level row.
QString NodeTimeLabel(const NodeProfile& n);

}  // namespace memplan::gui
