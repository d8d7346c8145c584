#include "compare_models.h"

#include <set>

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
    case CompareQuantity::kPredictedPeak: return PredictedPeak(p);
    case CompareQuantity::kMeasuredPeak: return p->measured_peak_bytes;
    case CompareQuantity::kBudget: return p->budget_bytes;
    case CompareQuantity::kBaselinePeak: return p->baseline_peak_bytes;
    default: return -1;
  }
}

bool IsBytes(CompareQuantity q) {
  return q == CompareQuantity::kPredictedPeak || q == CompareQuantity::kMeasuredPeak || q == CompareQuantity::kBudget ||
         q == CompareQuantity::kBaselinePeak;
}

QString QuantityName(CompareQuantity q) {
  switch (q) {
    case CompareQuantity::kPredictedPeak: return QStringLiteral("Predicted peak");
    case CompareQuantity::kMeasuredPeak: return QStringLiteral("Measured peak");
    case CompareQuantity::kBudget: return QStringLiteral("Budget");
    case CompareQuantity::kBaselinePeak: return QStringLiteral("Baseline peak");
    case CompareQuantity::kOverhead: return QStringLiteral("Recompute overhead");
    case CompareQuantity::kCheckpoints: return QStringLiteral("Checkpoints");
    case CompareQuantity::kStrategy: return QStringLiteral("Strategy");
    case CompareQuantity::kScheduleSteps: return QStringLiteral("Schedule steps");
  }
  return {};
}

// One item's value of a quantity.
Cell ValueCell(CompareQuantity q, const ItemPtr& p) {
  if (IsBytes(q)) {
    int64_t v = BytesOf(q, p);
    return NumberCell(BytesQ(v), static_cast<double>(v));
  }
  switch (q) {
    case CompareQuantity::kOverhead: {
      double o = p ? p->overhead : -1;
      return NumberCell(Q(PercentText(o)), o);
    }
    case CompareQuantity::kCheckpoints: return TextCell(p ? QString::number(p->checkpoints.size()) : QStringLiteral("\u2014"));
    case CompareQuantity::kStrategy: return TextCell(p && !p->strategy.empty() ? Q(p->strategy) : QStringLiteral("none"));
    case CompareQuantity::kScheduleSteps: {
      int64_t n = p && p->timeline ? static_cast<int64_t>(p->timeline->size()) : -1;
      return NumberCell(QString::number(n), static_cast<double>(n));
    }
    default: return {};
  }
}

}  // namespace

CompareModel::CompareModel(QObject* parent)
    : RowTableModel({QStringLiteral("Quantity"), QStringLiteral("A"), QStringLiteral("B"), QStringLiteral("B − A")}, parent) {}

void CompareModel::setItems(ItemPtr a, ItemPtr b) {
  a_ = std::move(a);
  b_ = std::move(b);
  std::vector<CompareQuantity> rows;
  if (a_ || b_) {
    for (int q = 0; q <= static_cast<int>(CompareQuantity::kScheduleSteps); ++q) rows.push_back(static_cast<CompareQuantity>(q));
  }
  setRows(std::move(rows));
}

Cell CompareModel::cell(const CompareQuantity& q, int column) const {
  switch (column) {
    case kQuantity: return TextCell(QuantityName(q));
    case kA: return ValueCell(q, a_);
    case kB: return ValueCell(q, b_);
    case kDelta:
      if (IsBytes(q)) return TextCell(SignedBytes(BytesOf(q, a_), BytesOf(q, b_)));
      if (q == CompareQuantity::kOverhead) {
        double oa = a_ ? a_->overhead : -1, ob = b_ ? b_->overhead : -1;
        return TextCell(oa >= 0 && ob >= 0 ? QStringLiteral("%1 points").arg((ob - oa) * 100, 0, 'f', 1) : QStringLiteral("\u2014"));
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
    std::set<std::string> sa(a->checkpoints.begin(), a->checkpoints.end()), sb(b->checkpoints.begin(), b->checkpoints.end());
    for (const std::string& n : a->checkpoints) if (!sb.count(n)) rows.push_back({n, KeptRow::KeptBy::kAOnly});
    for (const std::string& n : b->checkpoints) if (!sa.count(n)) rows.push_back({n, KeptRow::KeptBy::kBOnly});
    for (const std::string& n : a->checkpoints) if (sb.count(n)) rows.push_back({n, KeptRow::KeptBy::kBoth});
  }
  setRows(std::move(rows));
}

Cell KeptModel::cell(const KeptRow& row, int column) const {
  switch (column) {
    case kTensor: return TextCell(Q(row.tensor));
    case kKeptBy:
      switch (row.kept_by) {
        case KeptRow::KeptBy::kAOnly: return TextCell(QStringLiteral("A only"));
        case KeptRow::KeptBy::kBOnly: return TextCell(QStringLiteral("B only"));
        case KeptRow::KeptBy::kBoth: return TextCell(QStringLiteral("both"));
      }
  }
  return {};
}

}  // namespace memplan::gui
