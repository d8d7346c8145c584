#include "time_models.h"

#include <limits>
#include <set>

#include "common.h"

namespace memplan::gui {

namespace {

constexpr double kUnknownSort = -std::numeric_limits<double>::max();

// Measured against predicted, as three cells: the prediction, the difference, the ratio.
Cell PredictedCell(double predicted) {
  return predicted > 0 ? NumberCell(DurationText(predicted), predicted)
                       : NumberCell(QStringLiteral("\u2014"), kUnknownSort);
}

Cell DifferenceCell(double measured, double predicted) {
  if (!(predicted > 0)) return NumberCell(QStringLiteral("\u2014"), kUnknownSort);
  return NumberCell(SignedDuration(predicted, measured, /*with_percent=*/false),
                    measured - predicted);
}

Cell RatioCell(double measured, double predicted) {
  if (!(predicted > 0)) return NumberCell(QStringLiteral("\u2014"), kUnknownSort);
  const double r = measured / predicted;
  Cell c = NumberCell(QStringLiteral("%1×").arg(r, 0, 'f', 2), r);
  // Off by more than a quarter: slower than predicted in red, faster in blue.
  if (r > 1.25)
    c.color = QColor(0xb0, 0x10, 0x10);
  else if (r < 0.8)
    c.color = QColor(0x10, 0x40, 0xb0);
  c.tooltip = QStringLiteral("measured %1, predicted %2")
                  .arg(DurationText(measured), DurationText(predicted));
  return c;
}

}  // namespace

QString NodeTimeLabel(const NodeProfile& n) {
  QString phase = QString::fromLatin1(PhaseName(n.phase));
  if (n.node == kNone) return QStringLiteral("%1 (phase, segment %2)").arg(phase).arg(n.segment);
  QString name = n.name.empty() ? QStringLiteral("node %1").arg(n.node) : Q(n.name);
  return n.op.empty() ? QStringLiteral("%1 %2").arg(phase, name)
                      : QStringLiteral("%1 %2 %3").arg(phase, Q(n.op), name);
}

NodeTimeModel::NodeTimeModel(QObject* parent)
    : RowTableModel(
          {QStringLiteral("Node"), QStringLiteral("Op"), QStringLiteral("Phase"),
           QStringLiteral("Segment"), QStringLiteral("Calls"), QStringLiteral("Measured"),
           QStringLiteral("Predicted"), QStringLiteral("Difference"), QStringLiteral("Ratio")},
          parent) {}

void NodeTimeModel::setProfile(const std::shared_ptr<const Profile>& profile) {
  std::vector<NodeTimeRow> rows;
  if (profile) {
    rows.reserve(profile->nodes.size());
    for (const NodeProfile& n : profile->nodes)
      rows.push_back({n, MeasuredSeconds(*profile, n), HasDeviceTimes(*profile)});
  }
  setRows(std::move(rows));
}

Cell NodeTimeModel::cell(const NodeTimeRow& row, int column) const {
  const NodeProfile& n = row.node;
  switch (column) {
    case kNode: {
      Cell c = TextCell(n.node == kNone  ? QStringLiteral("(the phase, outside nodes)")
                        : n.name.empty() ? QStringLiteral("node %1").arg(n.node)
                                         : Q(n.name));
      c.tooltip =
          n.node == kNone
              ? QStringLiteral(
                    "time of the %1 phase not inside any node: the autograd engine, input slicing, "
                    "the optimizer")
                    .arg(QString::fromLatin1(PhaseName(n.phase)))
              : QStringLiteral("node %1").arg(n.node);
      if (n.node == kNone) c.color = Qt::darkGray;
      return c;
    }
    case kOp:
      return TextCell(Q(n.op));
    case kPhase:
      return TextCell(QString::fromLatin1(PhaseName(n.phase)));
    case kSegment:
      return NumberCell(QString::number(n.segment), n.segment);
    case kCalls:
      return NumberCell(QString::number(n.calls), static_cast<double>(n.calls));
    case kMeasured: {
      Cell c = NumberCell(DurationText(row.measured), row.measured);
      c.tooltip = row.device ? QStringLiteral("kernels %1 (CUPTI) · host %2")
                                   .arg(DurationText(n.device_seconds), DurationText(n.seconds))
                             : QStringLiteral("host wall time, exclusive of nested scopes");
      return c;
    }
    case kPredicted:
      return PredictedCell(n.predicted_seconds);
    case kDifference:
      return DifferenceCell(row.measured, n.predicted_seconds);
    case kRatio:
      return RatioCell(row.measured, n.predicted_seconds);
  }
  return {};
}

std::vector<RecomputeTimeRow> RecomputeTimeRows(const Profile& profile) {
  std::set<int32_t> segments;
  for (const NodeProfile& n : profile.nodes) {
    if (n.phase == Phase::kRecompute) segments.insert(n.segment);
  }
  std::vector<RecomputeTimeRow> rows;
  for (int32_t s : segments)
    rows.push_back({s, profile.RecomputeSeconds(s), profile.PredictedRecomputeSeconds(s)});
  if (!rows.empty())
    rows.push_back({-1, profile.RecomputeSeconds(), profile.PredictedRecomputeSeconds()});
  return rows;
}

RecomputeTimeModel::RecomputeTimeModel(QObject* parent)
    : RowTableModel(
          {QStringLiteral("Recompute of"), QStringLiteral("Measured"), QStringLiteral("Predicted"),
           QStringLiteral("Difference"), QStringLiteral("Ratio")},
          parent) {}

void RecomputeTimeModel::setProfile(const std::shared_ptr<const Profile>& profile) {
  setRows(profile ? RecomputeTimeRows(*profile) : std::vector<RecomputeTimeRow>{});
}

Cell RecomputeTimeModel::cell(const RecomputeTimeRow& row, int column) const {
  switch (column) {
    case kSegment: {
      Cell c = row.segment < 0
                   ? TextCell(QStringLiteral("all segments"))
                   : NumberCell(QStringLiteral("segment %1").arg(row.segment), row.segment);
      if (row.segment < 0) c.sort = std::numeric_limits<double>::max();  // the total sorts last
      return c;
    }
    case kMeasured:
      return NumberCell(DurationText(row.measured), row.measured);
    case kPredicted:
      return PredictedCell(row.predicted);
    case kDifference:
      return DifferenceCell(row.measured, row.predicted);
    case kRatio:
      return RatioCell(row.measured, row.predicted);
  }
  return {};
}

}  // namespace memplan::gui
