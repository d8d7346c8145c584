#include "strategy_model.h"

#include "common.h"

namespace memplan::gui {

namespace {
Cell CountCell(int64_t n) {
  return NumberCell(n < 0 ? QStringLiteral("\u2014") : QString::number(n), static_cast<double>(n));
}
}  // namespace

StrategyModel::StrategyModel(QObject* parent)
    : RowTableModel({QStringLiteral("Strategy"), QStringLiteral("Peak"), QStringLiteral("Overhead"),
                     QStringLiteral("Predicted recompute"), QStringLiteral("Checkpoints"),
                     QStringLiteral("Recomputed tensors"), QStringLiteral("Sections"),
                     QStringLiteral("Feasible"), QStringLiteral("Solve time")},
                    parent) {}

Cell StrategyModel::cell(const StrategyRow& row, int column) const {
  switch (column) {
    case kStrategy:
      return TextCell(Q(row.strategy));
    case kPeak:
      return NumberCell(BytesQ(row.peak_bytes), static_cast<double>(row.peak_bytes));
    case kOverhead:
      return NumberCell(Q(PercentText(row.overhead)), row.overhead);
    case kRecomputeTime:
      return NumberCell(DurationText(row.recompute_seconds), row.recompute_seconds);
    case kCheckpoints:
      return CountCell(row.checkpoints);
    case kRecomputed:
      return CountCell(row.recomputed);
    case kSections:
      return CountCell(row.sections);
    case kFeasible: {
      Cell c = TextCell(row.feasible ? QStringLiteral("yes") : QStringLiteral("no"));
      c.color = row.feasible ? QColor(0x2a, 0x7a, 0x2a) : QColor(0xc0, 0x10, 0x10);
      return c;
    }
    case kSolveTime:
      return NumberCell(SecondsText(row.solve_seconds), row.solve_seconds);
  }
  return {};
}

}  // namespace memplan::gui
