#include "compare_models.h"

#include <map>
#include <set>
#include <tuple>

#include "common.h"

namespace memplan::gui {

namespace {

int64_t PredictedPeak(const ItemPtr& p) {
  if (!p) return -1;
  if (p->plan_peak_bytes >= 0) return p->plan_peak_bytes;
  return p->timeline ? p->timeline->peak_bytes : p->baseline_peak_bytes;
}

int64_t BytesOf(CompareQuantity q, const ItemPtr& p) {
  if (!p) return -1;
  switch (q) {
    case CompareQuantity::kPredictedPeak:
      return PredictedPeak(p);
    case CompareQuantity::kMeasuredPeak:
      return p->measured_peak_bytes;
    case CompareQuantity::kBudget:
      return p->budget_bytes;
    case CompareQuantity::kBaselinePeak:
      return p->baseline_peak_bytes;
    case CompareQuantity::kCudaReservedPeak:
      return p->measured_reserved_peak_bytes;  // -1 off CUDA
    case CompareQuantity::kPredictedReservedPeak:
      return p->timeline && p->timeline->reserved_peak_bytes >= 0
                 ? p->timeline->reserved_peak_bytes
                 : p->predicted_reserved_peak_bytes;
    case CompareQuantity::kDeviceMemoryPeak:
      return p->device_memory_peak_bytes;
    default:
      return -1;
  }
}

bool IsBytes(CompareQuantity q) {
  return q == CompareQuantity::kPredictedPeak || q == CompareQuantity::kMeasuredPeak ||
         q == CompareQuantity::kBudget || q == CompareQuantity::kBaselinePeak ||
         q == CompareQuantity::kCudaReservedPeak || q == CompareQuantity::kPredictedReservedPeak ||
         q == CompareQuantity::kDeviceMemoryPeak;
}

bool HasPredictedTimes(const Profile& p) {
  for (const NodeProfile& n : p.nodes)
    if (n.predicted_seconds > 0) return true;
  return false;
}

// Seconds of a time quantity: the run's or profile's own figures; -1: unknown.
double SecondsOf(CompareQuantity q, const ItemPtr& p) {
  if (!p) return -1;
  const Profile* prof = p->profile.get();
  switch (q) {
    case CompareQuantity::kStepTime:
      return p->step_seconds;
    case CompareQuantity::kRecomputeTime:
      return p->recompute_seconds;
    case CompareQuantity::kForwardTime:
      return prof ? prof->PhaseSeconds(Phase::kForward) : -1;
    case CompareQuantity::kLossTime:
      return prof ? prof->PhaseSeconds(Phase::kLoss) : -1;
    case CompareQuantity::kBackwardTime:
      return prof ? prof->PhaseSeconds(Phase::kBackward) : -1;
    case CompareQuantity::kOptimizerTime:
      return prof ? prof->PhaseSeconds(Phase::kOptimizer) : -1;
    case CompareQuantity::kPredictedRecomputeTime:
      return prof && HasPredictedTimes(*prof) ? prof->PredictedRecomputeSeconds() : -1;
    default:
      return -1;
  }
}

bool IsSeconds(CompareQuantity q) {
  return q >= CompareQuantity::kStepTime && q <= CompareQuantity::kPredictedRecomputeTime;
}

QString QuantityName(CompareQuantity q) {
  switch (q) {
    case CompareQuantity::kPredictedPeak:
      return QStringLiteral("Predicted peak");
    case CompareQuantity::kMeasuredPeak:
      return QStringLiteral("Measured peak");
    case CompareQuantity::kBudget:
      return QStringLiteral("Budget");
    case CompareQuantity::kBaselinePeak:
      return QStringLiteral("Baseline peak");
    case CompareQuantity::kOverhead:
      return QStringLiteral("Recompute overhead");
    case CompareQuantity::kCheckpoints:
      return QStringLiteral("Checkpoints");
    case CompareQuantity::kStrategy:
      return QStringLiteral("Strategy");
    case CompareQuantity::kScheduleSteps:
      return QStringLiteral("Schedule steps");
    case CompareQuantity::kStepTime:
      return QStringLiteral("Step time");
    case CompareQuantity::kRecomputeTime:
      return QStringLiteral("Recompute time");
    case CompareQuantity::kForwardTime:
      return QStringLiteral("Forward time");
    case CompareQuantity::kLossTime:
      return QStringLiteral("Loss time");
    case CompareQuantity::kBackwardTime:
      return QStringLiteral("Backward time");
    case CompareQuantity::kOptimizerTime:
      return QStringLiteral("Optimizer time");
    case CompareQuantity::kPredictedRecomputeTime:
      return QStringLiteral("Predicted recompute time");
    case CompareQuantity::kCudaReservedPeak:
      return QStringLiteral("CUDA reserved peak");
    case CompareQuantity::kPredictedReservedPeak:
      return QStringLiteral("Predicted reserved peak");
    case CompareQuantity::kDeviceMemoryPeak:
      return QStringLiteral("Device memory peak (CUPTI)");
  }
  return {};
}

// One item's value of a quantity.
Cell ValueCell(CompareQuantity q, const ItemPtr& p) {
  if (IsBytes(q)) {
    int64_t v = BytesOf(q, p);
    return NumberCell(BytesQ(v), static_cast<double>(v));
  }
  if (IsSeconds(q)) {
    const double v = SecondsOf(q, p);
    return NumberCell(DurationText(v), v);
  }
  switch (q) {
    case CompareQuantity::kOverhead: {
      double o = p ? p->overhead : -1;
      return NumberCell(Q(PercentText(o)), o);
    }
    case CompareQuantity::kCheckpoints:
      return TextCell(p ? QString::number(p->checkpoints.size()) : QStringLiteral("\u2014"));
    case CompareQuantity::kStrategy:
      return TextCell(p && !p->strategy.empty() ? Q(p->strategy) : QStringLiteral("none"));
    case CompareQuantity::kScheduleSteps: {
      int64_t n = p && p->timeline ? static_cast<int64_t>(p->timeline->size()) : -1;
      return NumberCell(n < 0 ? QStringLiteral("\u2014") : QString::number(n),
                        static_cast<double>(n));
    }
    default:
      return {};
  }
}

}  // namespace

CompareModel::CompareModel(QObject* parent)
    : RowTableModel({QStringLiteral("Quantity"), QStringLiteral("A"), QStringLiteral("B"),
                     QStringLiteral("B − A")},
                    parent) {}

void CompareModel::setItems(ItemPtr a, ItemPtr b) {
  a_ = std::move(a);
  b_ = std::move(b);
  std::vector<CompareQuantity> rows;
  auto add = [&rows](CompareQuantity first, CompareQuantity last) {
    for (int q = static_cast<int>(first); q <= static_cast<int>(last); ++q)
      rows.push_back(static_cast<CompareQuantity>(q));
  };
  auto timed = [](const ItemPtr& p) { return p && p->step_seconds >= 0; };
  auto profiled = [](const ItemPtr& p) { return p && p->profile; };
  auto on_cuda = [](const ItemPtr& p) { return p && p->measured_reserved_peak_bytes >= 0; };
  auto reserved_predicted = [](const ItemPtr& p) {
    return p && BytesOf(CompareQuantity::kPredictedReservedPeak, p) >= 0;
  };
  auto cupti = [](const ItemPtr& p) { return p && p->device_memory_peak_bytes >= 0; };
  auto planned = [](const ItemPtr& p) { return p && !p->profile; };
  if (planned(a_) || planned(b_)) {
    add(CompareQuantity::kPredictedPeak, CompareQuantity::kScheduleSteps);
  } else if (a_ || b_) {
    rows.push_back(CompareQuantity::kMeasuredPeak);  // two profiles: only what they measured
  }
  if (timed(a_) || timed(b_)) add(CompareQuantity::kStepTime, CompareQuantity::kRecomputeTime);
  if (profiled(a_) || profiled(b_))
    add(CompareQuantity::kForwardTime, CompareQuantity::kPredictedRecomputeTime);
  if (on_cuda(a_) || on_cuda(b_)) rows.push_back(CompareQuantity::kCudaReservedPeak);
  if (reserved_predicted(a_) || reserved_predicted(b_))
    rows.push_back(CompareQuantity::kPredictedReservedPeak);
  if (cupti(a_) || cupti(b_)) rows.push_back(CompareQuantity::kDeviceMemoryPeak);
  setRows(std::move(rows));
}

Cell CompareModel::cell(const CompareQuantity& q, int column) const {
  switch (column) {
    case kQuantity: {
      // Profile::PhaseSeconds is host time; on CUDA the kernels run behind it.
      auto on_device = [](const ItemPtr& p) {
        return p && p->profile && HasDeviceTimes(*p->profile);
      };
      const bool phase = q >= CompareQuantity::kForwardTime && q <= CompareQuantity::kOptimizerTime;
      return TextCell(QuantityName(q) + (phase && (on_device(a_) || on_device(b_))
                                             ? QStringLiteral(" (host)")
                                             : QString()));
    }
    case kA:
      return ValueCell(q, a_);
    case kB:
      return ValueCell(q, b_);
    case kDelta:
      if (IsBytes(q)) return TextCell(SignedBytes(BytesOf(q, a_), BytesOf(q, b_)));
      if (IsSeconds(q)) return TextCell(SignedDuration(SecondsOf(q, a_), SecondsOf(q, b_)));
      if (q == CompareQuantity::kOverhead) {
        double oa = a_ ? a_->overhead : -1, ob = b_ ? b_->overhead : -1;
        return TextCell(oa >= 0 && ob >= 0
                            ? QStringLiteral("%1 points").arg((ob - oa) * 100, 0, 'f', 1)
                            : QStringLiteral("\u2014"));
      }
      return TextCell(QString());
  }
  return {};
}

KeptModel::KeptModel(QObject* parent)
    : RowTableModel({QStringLiteral("Checkpoint tensor"), QStringLiteral("Kept by")}, parent) {}

void KeptModel::setItems(const ItemPtr& a, const ItemPtr& b) {
  std::vector<KeptRow> rows;
  if (a && b) {
    std::set<std::string> sa(a->checkpoints.begin(), a->checkpoints.end()),
        sb(b->checkpoints.begin(), b->checkpoints.end());
    for (const std::string& n : a->checkpoints)
      if (!sb.count(n)) rows.push_back({n, KeptRow::KeptBy::kAOnly});
    for (const std::string& n : b->checkpoints)
      if (!sa.count(n)) rows.push_back({n, KeptRow::KeptBy::kBOnly});
    for (const std::string& n : a->checkpoints)
      if (sb.count(n)) rows.push_back({n, KeptRow::KeptBy::kBoth});
  }
  setRows(std::move(rows));
}

Cell KeptModel::cell(const KeptRow& row, int column) const {
  switch (column) {
    case kTensor:
      return TextCell(Q(row.tensor));
    case kKeptBy:
      switch (row.kept_by) {
        case KeptRow::KeptBy::kAOnly:
          return TextCell(QStringLiteral("A only"));
        case KeptRow::KeptBy::kBOnly:
          return TextCell(QStringLiteral("B only"));
        case KeptRow::KeptBy::kBoth:
          return TextCell(QStringLiteral("both"));
      }
  }
  return {};
}

std::vector<NodeTimeDiffRow> NodeTimeDiffRows(const Profile& a, const Profile& b) {
  // Key: (phase, node) for nodes, (phase, kNone, segment) for phase-level scopes.
  using Key = std::tuple<int, NodeId, int32_t>;
  auto key_of = [](const NodeProfile& n) {
    return Key{static_cast<int>(n.phase), n.node, n.node == kNone ? n.segment : 0};
  };
  std::map<Key, size_t> index;
  std::vector<NodeTimeDiffRow> rows;
  auto row_of = [&](const NodeProfile& n) -> NodeTimeDiffRow& {
    auto [it, fresh] = index.emplace(key_of(n), rows.size());
    if (fresh) rows.push_back({n.phase, n.node, n.segment, n.name, n.op, -1, -1});
    return rows[it->second];
  };
  for (const NodeProfile& n : a.nodes) row_of(n).a = MeasuredSeconds(a, n);
  for (const NodeProfile& n : b.nodes) row_of(n).b = MeasuredSeconds(b, n);
  return rows;
}

NodeTimeDiffModel::NodeTimeDiffModel(QObject* parent)
    : RowTableModel({QStringLiteral("Node"), QStringLiteral("Op"), QStringLiteral("Phase"),
                     QStringLiteral("A"), QStringLiteral("B"), QStringLiteral("B − A"),
                     QStringLiteral("B / A")},
                    parent) {}

void NodeTimeDiffModel::setItems(const ItemPtr& a, const ItemPtr& b) {
  if (a && b && a->profile && b->profile)
    setRows(NodeTimeDiffRows(*a->profile, *b->profile));
  else
    setRows({});
}

Cell NodeTimeDiffModel::cell(const NodeTimeDiffRow& row, int column) const {
  constexpr double kUnknown = -1e300;
  switch (column) {
    case kNode: {
      if (row.node != kNone)
        return TextCell(row.name.empty() ? QStringLiteral("node %1").arg(row.node) : Q(row.name));
      Cell c = TextCell(QStringLiteral("(the phase, segment %1)").arg(row.segment));
      c.color = Qt::darkGray;
      return c;
    }
    case kOp:
      return TextCell(Q(row.op));
    case kPhase:
      return TextCell(QString::fromLatin1(PhaseName(row.phase)));
    case kA:
      return NumberCell(DurationText(row.a), row.a);
    case kB:
      return NumberCell(DurationText(row.b), row.b);
    case kDelta: {
      if (row.a < 0 || row.b < 0) return NumberCell(QStringLiteral("\u2014"), kUnknown);
      Cell c = NumberCell(SignedDuration(row.a, row.b, /*with_percent=*/false), row.b - row.a);
      return c;
    }
    case kRatio: {
      if (!(row.a > 0) || row.b < 0) return NumberCell(QStringLiteral("\u2014"), kUnknown);
      return NumberCell(QStringLiteral("%1×").arg(row.b / row.a, 0, 'f', 2), row.b / row.a);
    }
  }
  return {};
}

}  // namespace memplan::gui
