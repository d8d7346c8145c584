#include "summary_models.h"

#include <QFileInfo>
#include <algorithm>
#include <iterator>

#include "common.h"

namespace memplan::gui {

ItemPtr BaselineSource(const ItemPtr& base, const ItemPtr& plan) {
  return base && base->baseline_peak_bytes >= 0   ? base
         : plan && plan->baseline_peak_bytes >= 0 ? plan
                                                  : nullptr;
}

ItemPtr BreakdownSource(const ItemPtr& base, const ItemPtr& plan) {
  return base && base->has_breakdown ? base : plan && plan->has_breakdown ? plan : nullptr;
}

int64_t BreakdownPeakBytes(const Item& source) {
  // A plan's breakdown is taken at its own peak; a model's or analysis's at the baseline peak.
  return source.kind == SourceKind::kPlan ? source.plan_peak_bytes : source.baseline_peak_bytes;
}

bool IsSelective(const Item& plan) {
  return plan.strategy == "selective" || !plan.recomputed.empty() || !plan.storages.empty();
}

std::vector<SummaryRow> SummaryRows(const ItemPtr& base, const ItemPtr& plan, const ItemPtr& run,
                                    const ItemPtr& profile) {
  std::vector<SummaryRow> rows;
  ItemPtr any = base ? base : plan ? plan : run ? run : profile;
  if (!any) return rows;
  auto row = [&](const QString& k, const QString& v, const ItemPtr& src, const QString& tip = {}) {
    rows.push_back({k, v, tip.isEmpty() ? v : tip, src ? Q(src->title) : QString()});
  };
  const QString dash = QStringLiteral("\u2014");
  QString model = Q(any->model);
  row(QStringLiteral("Model"), QFileInfo(model).fileName(), any, model);
  if (any->batch >= 0) row(QStringLiteral("Batch"), QString::number(any->batch), any);
  if (!any->optimizer.empty()) row(QStringLiteral("Optimizer"), Q(any->optimizer), any);
  if (any->num_nodes >= 0) row(QStringLiteral("Nodes"), QString::number(any->num_nodes), any);
  if (any->param_bytes >= 0) row(QStringLiteral("Parameters"), BytesQ(any->param_bytes), any);
  if (any->forward_flops >= 0)
    row(QStringLiteral("Forward FLOPs"), FlopsText(any->forward_flops), any);
  ItemPtr baseline_src = BaselineSource(base, plan);
  row(QStringLiteral("Baseline peak"),
      BytesQ(baseline_src ? baseline_src->baseline_peak_bytes : -1), baseline_src);
  if (base && !base->predicted_for.empty()) {
    // Predicted for a GPU: the caching allocator model's segments beside the allocated peak.
    row(QStringLiteral("Baseline reserved peak"), BytesQ(base->predicted_reserved_peak_bytes), base,
        QStringLiteral("predicted for %1 (%2 segments), with %3 of cuBLAS workspaces")
            .arg(Q(base->predicted_for), Q(base->allocator_mode), BytesQ(base->workspace_bytes)));
  }
  if (base && !base->peak_event.empty()) row(QStringLiteral("Peak at"), Q(base->peak_event), base);
  if (plan) {
    row(QStringLiteral("Plan strategy"), Q(plan->strategy), plan);
    if (plan->devices > 1) {
      // As `memplan plan` prints the layout; the peaks below are then per rank.
      row(QStringLiteral("Devices"),
          QStringLiteral("%1 ranks, shard %2%3: every peak is per rank")
              .arg(plan->devices)
              .arg(Q(plan->shard))
              .arg(plan->bucket_count > 0 ? QStringLiteral(", %1 buckets").arg(plan->bucket_count)
                                          : QString()),
          plan);
      if (plan->predicted_comm_seconds >= 0) {
        row(QStringLiteral("Predicted communication time"),
            DurationText(plan->predicted_comm_seconds), plan);
      }
    }
    row(QStringLiteral("Plan peak"), BytesQ(plan->plan_peak_bytes), plan);
    if (plan->predicted_reserved_peak_bytes >= 0)
      row(QStringLiteral("Plan reserved peak"), BytesQ(plan->predicted_reserved_peak_bytes), plan);
    row(QStringLiteral("Budget"), BytesQ(plan->budget_bytes), plan);
    if (!plan->budget_of.empty())
      row(QStringLiteral("Budget bounds"), Q(plan->budget_of) + QStringLiteral(" memory"), plan);
    row(QStringLiteral("Fits the budget"),
        plan->feasible < 0 ? dash
        : plan->feasible   ? QStringLiteral("yes")
                           : QStringLiteral("no"),
        plan);
    row(QStringLiteral("Recompute overhead"),
        QStringLiteral("%1 of the forward FLOPs (%2 FLOPs)")
            .arg(Q(PercentText(plan->overhead)), FlopsText(plan->recompute_flops)),
        plan);
    row(QStringLiteral("Checkpoints / sections"),
        QStringLiteral("%1 / %2")
            .arg(plan->checkpoints.size())
            .arg(plan->num_sections < 0 ? dash : QString::number(plan->num_sections)),
        plan);
    if (plan->predicted_recompute_seconds >= 0) {
      row(QStringLiteral("Predicted recompute time"),
          DurationText(plan->predicted_recompute_seconds), plan);
    }
    if (plan->offload) {
      // As `memplan plan` prints an offload plan: what moved to pinned host memory, its peak
      // there against the host budget, and the copies' stall.
      row(QStringLiteral("Offloaded to host memory"),
          QStringLiteral("%1 storages%2")
              .arg(plan->offloaded.size())
              .arg(plan->offloaded_bytes >= 0
                       ? QStringLiteral(" (%1)").arg(BytesQ(plan->offloaded_bytes))
                       : QString()),
          plan);
      row(QStringLiteral("Host peak"),
          QStringLiteral("%1 of a host budget of %2")
              .arg(BytesQ(plan->predicted_host_peak_bytes), plan->host_budget_bytes > 0
                                                                ? BytesQ(plan->host_budget_bytes)
                                                                : QStringLiteral("no limit")),
          plan, QStringLiteral("pinned host memory, not counted in the device's peak"));
      if (plan->predicted_stall_seconds >= 0) {
        row(QStringLiteral("Predicted copy stall"), DurationText(plan->predicted_stall_seconds),
            plan, QStringLiteral("what the step waits for copies its compute does not hide"));
      }
    }
    if (IsSelective(*plan)) {
      if (!plan->storages.empty()) {
        // As `memplan plan` prints them.
        const SelectiveCounts c = CountSelective(plan->storages);
        row(QStringLiteral("Saved activations kept"),
            QStringLiteral("%1 of %2 (%3)").arg(c.kept).arg(c.saved).arg(BytesQ(c.kept_bytes)),
            plan);
        row(QStringLiteral("Saved activations recomputed"),
            QStringLiteral("%1 of %2 (%3)")
                .arg(c.recomputed_saved)
                .arg(c.saved)
                .arg(BytesQ(c.recomputed_saved_bytes)),
            plan);
        if (c.recomputed_unsaved > 0) {
          row(QStringLiteral("Unsaved storages recomputed"),
              QStringLiteral("%1 (%2), only as inputs of other recomputes")
                  .arg(c.recomputed_unsaved)
                  .arg(BytesQ(c.recomputed_unsaved_bytes)),
              plan);
        }
        row(QStringLiteral("Recomputations in the backward"), QString::number(c.recomputes), plan,
            QStringLiteral("%1 storages recomputed %2 times: one recomputed after it was freed is "
                           "recomputed again")
                .arg(c.recomputed())
                .arg(c.recomputes));
      } else {
        // A plan file names its recomputed tensors; their sizes need the model.
        row(QStringLiteral("Saved activations kept"), dash, plan);
        QStringList names;
        for (size_t i = 0; i < plan->recomputed.size() && i < 20; ++i)
          names << Q(plan->recomputed[i]);
        if (plan->recomputed.size() > 20) names << QStringLiteral("…");
        row(QStringLiteral("Tensors recomputed"), QString::number(plan->recomputed.size()), plan,
            names.join(", "));
      }
    }
  } else {
    row(QStringLiteral("Plan peak"), QStringLiteral("\u2014 (no plan open)"), nullptr);
  }
  if (run) {
    row(QStringLiteral("Measured peak"), BytesQ(run->measured_peak_bytes), run,
        run->measured_reserved_peak_bytes >= 0
            ? QStringLiteral("allocated: the caching allocator's blocks (the quantity the plan's "
                             "peak predicts)")
            : QString());
    if (run->run_predicted_peak_bytes > 0 && run->measured_peak_bytes >= 0) {
      row(QStringLiteral("Measured vs predicted"),
          QStringLiteral("%1 vs %2")
              .arg(BytesQ(run->measured_peak_bytes), BytesQ(run->run_predicted_peak_bytes)),
          run);
    }
    if (run->measured_reserved_peak_bytes >= 0) {
      row(QStringLiteral("Measured reserved peak"), BytesQ(run->measured_reserved_peak_bytes), run,
          QStringLiteral("the caching allocator's segments (cudaMalloc), last step"));
      // Reserved is compared only with a reserved prediction.
      row(QStringLiteral("Reserved: measured vs predicted"),
          run->predicted_reserved_peak_bytes >= 0
              ? QStringLiteral("%1 vs %2")
                    .arg(BytesQ(run->measured_reserved_peak_bytes),
                         BytesQ(run->predicted_reserved_peak_bytes))
              : QStringLiteral("%1 vs — (the run's plan predicts no reserved peak)")
                    .arg(BytesQ(run->measured_reserved_peak_bytes)),
          run);
    }
    row(QStringLiteral("Device"), Q(run->device), run);
    // One row per rank of a data-parallel run: each metered its own peak.
    for (const Item::RankFigures& k : run->ranks) {
      row(QStringLiteral("Rank %1").arg(k.rank),
          QStringLiteral("%1 measured vs %2 predicted, step %3, communication %4")
              .arg(BytesQ(k.measured_peak_bytes), BytesQ(k.predicted_peak_bytes),
                   SecondsText(k.step_seconds), SecondsText(k.comm_seconds)),
          run);
    }
    row(QStringLiteral("Step time / recompute"),
        QStringLiteral("%1 / %2").arg(SecondsText(run->step_seconds),
                                      SecondsText(run->recompute_seconds)),
        run);
  } else if (!profile) {
    row(QStringLiteral("Measured peak"), QStringLiteral("\u2014 (no run open)"), nullptr);
  }
  if (profile && profile->profile) {
    const Profile& p = *profile->profile;
    row(QStringLiteral("Profile"),
        QStringLiteral("step %1 on %2 (%3 backend)").arg(p.step + 1).arg(Q(p.device), Q(p.backend)),
        profile);
    if (profile->device_memory_peak_bytes >= 0) {
      // CUPTI: three kinds of memory, each under its own name.
      row(QStringLiteral("Device memory peak (CUPTI)"), BytesQ(profile->device_memory_peak_bytes),
          profile, QStringLiteral("what cudaMalloc held, as CUPTI's memory records saw it"));
      row(QStringLiteral("Profiled allocated peak"), BytesQ(profile->measured_peak_bytes), profile);
      row(QStringLiteral("Profiled reserved peak"), BytesQ(profile->measured_reserved_peak_bytes),
          profile);
    } else {
      row(QStringLiteral("Profiled peak"), BytesQ(p.peak_bytes), profile);
    }
    row(QStringLiteral("Profiled step time"), DurationText(p.step_seconds), profile);
    const double measured = p.RecomputeSeconds(), predicted = p.PredictedRecomputeSeconds();
    row(QStringLiteral("Recompute measured / predicted"),
        QStringLiteral("%1 / %2").arg(DurationText(measured), predicted > 0 || measured == 0
                                                                  ? DurationText(predicted)
                                                                  : dash),
        profile);
  }
  if (base && !base->bottlenecks.empty()) {
    QStringList names;
    for (size_t i = 0; i < base->bottlenecks.size() && i < 3; ++i) names << Q(base->bottlenecks[i]);
    row(QStringLiteral("Bottleneck tensors"),
        QStringLiteral("%1: %2…").arg(base->bottlenecks.size()).arg(names.join(", ")), base);
  }
  if (any->notes.size()) row(QStringLiteral("Notes"), Q(any->notes.front()), any);
  return rows;
}

SummaryModel::SummaryModel(QObject* parent)
    : RowTableModel({QStringLiteral("Quantity"), QStringLiteral("Value"), QStringLiteral("From")},
                    parent) {}

Cell SummaryModel::cell(const SummaryRow& row, int column) const {
  switch (column) {
    case kQuantity:
      return TextCell(row.quantity);
    case kValue: {
      Cell c = TextCell(row.value);
      c.tooltip = row.tooltip;
      return c;
    }
    case kFrom:
      return TextCell(row.from);
  }
  return {};
}

std::vector<MemoryCategory> CategoriesBySize(const CategoryBytes& b) {
  std::vector<MemoryCategory> order(std::begin(kStackOrder), std::end(kStackOrder));
  std::stable_sort(order.begin(), order.end(), [&](MemoryCategory x, MemoryCategory y) {
    return b[static_cast<int>(x)] < b[static_cast<int>(y)];
  });
  return order;
}

BreakdownModel::BreakdownModel(QObject* parent)
    : RowTableModel({QStringLiteral("Category"), QStringLiteral("Bytes at the peak"),
                     QStringLiteral("Share")},
                    parent) {}

void BreakdownModel::setBreakdown(const CategoryBytes& breakdown, int64_t peak_bytes) {
  std::vector<MemoryCategory> order = CategoriesBySize(breakdown);
  std::vector<BreakdownRow> rows;
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    rows.push_back({*it, breakdown[static_cast<int>(*it)], peak_bytes});
  setRows(std::move(rows));
}

Cell BreakdownModel::cell(const BreakdownRow& row, int column) const {
  switch (column) {
    case kCategory: {
      Cell c = TextCell(CategoryLabel(row.category));
      c.decoration = CategoryColor(row.category);
      return c;
    }
    case kBytes:
      return NumberCell(BytesQ(row.bytes), static_cast<double>(row.bytes));
    case kShare:
      return NumberCell(
          Q(PercentText(row.peak_bytes > 0 ? static_cast<double>(row.bytes) / row.peak_bytes : -1)),
          static_cast<double>(row.bytes));
  }
  return {};
}

FilesModel::FilesModel(QObject* parent)
    : RowTableModel({QStringLiteral("File"), QStringLiteral("Kind"), QStringLiteral("Status")},
                    parent) {}

Cell FilesModel::cell(const FileRow& row, int column) const {
  switch (column) {
    case kFile: {
      Cell c = TextCell(QFileInfo(row.path).fileName());
      c.tooltip = row.path;
      return c;
    }
    case kKind:
      return TextCell(row.status == FileRow::Status::kLoaded
                          ? QString::fromLatin1(SourceKindName(row.kind))
                          : QString());
    case kStatus: {
      switch (row.status) {
        case FileRow::Status::kLoaded: {
          if (!row.mismatch.isEmpty()) {
            Cell c = TextCell(QStringLiteral("⚠ ") + row.mismatch);
            c.color = QColor(0xb0, 0x60, 0x00);
            c.tooltip = row.mismatch;
            return c;
          }
          Cell c = TextCell(QStringLiteral("loaded"));
          c.color = QColor(0x2a, 0x7a, 0x2a);
          return c;
        }
        case FileRow::Status::kFailed: {
          Cell c = TextCell(row.error);
          c.color = QColor(0xc0, 0x10, 0x10);
          c.tooltip = row.error;
          return c;
        }
        case FileRow::Status::kLoading:
          return TextCell(QStringLiteral("loading…"));
      }
    }
  }
  return {};
}

}  // namespace memplan::gui
