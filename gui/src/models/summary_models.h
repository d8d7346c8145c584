// The summary page's tables: the headline quantities of the open files, memory at the peak by
// category, and the opened files with their status.
#pragma once

#include <QString>
#include <vector>

#include "loader.h"
#include "table_model.h"

namespace memplan::gui {

// One quantity of the summary, and the file it comes from.
struct SummaryRow {
  QString quantity;
  QString value;
  QString tooltip;  // the full value (file paths), or the value itself
  QString from;     // the title of the item it comes from; empty: none
};

// The item whose baseline peak the summary shows: the model or analysis, else the plan.
ItemPtr BaselineSource(const ItemPtr& base, const ItemPtr& plan);
// The item whose breakdown at the peak the summary shows, and that peak as its producer
// (analyzer or planner) reported it.
ItemPtr BreakdownSource(const ItemPtr& base, const ItemPtr& plan);
int64_t BreakdownPeakBytes(const Item& source);

// Whether `plan` is a selective plan (plan.h: per-tensor keep or recompute).
bool IsSelective(const Item& plan);

// What the summary shows for the latest model or analysis, plan, run and profile (any may be
// null).
std::vector<SummaryRow> SummaryRows(const ItemPtr& base, const ItemPtr& plan, const ItemPtr& run,
                                    const ItemPtr& profile = nullptr);

class SummaryModel : public RowTableModel<SummaryRow> {
 public:
  enum Column { kQuantity, kValue, kFrom, kColumnCount };
  explicit SummaryModel(QObject* parent = nullptr);
  void setItems(const ItemPtr& base, const ItemPtr& plan, const ItemPtr& run,
                const ItemPtr& profile = nullptr) {
    setRows(SummaryRows(base, plan, run, profile));
  }

 protected:
  Cell cell(const SummaryRow& row, int column) const override;
};

struct BreakdownRow {
  MemoryCategory category = MemoryCategory::kActivation;
  int64_t bytes = 0;
  int64_t peak_bytes = -1;  // the peak the breakdown belongs to, as its producer reported it
};

// Categories from the smallest to the largest share of `b`; ties in reverse stacking order
// (so that the table, largest first, lists ties in stacking order reversed, as the chart does).
std::vector<MemoryCategory> CategoriesBySize(const CategoryBytes& b);

class BreakdownModel : public RowTableModel<BreakdownRow> {
 public:
  enum Column { kCategory, kBytes, kShare, kColumnCount };
  explicit BreakdownModel(QObject* parent = nullptr);
  // Every category, largest first. `peak_bytes`: the peak the analyzer or planner reported
  // for the step the breakdown was taken at (the shares are of it); -1: unknown.
  void setBreakdown(const CategoryBytes& breakdown, int64_t peak_bytes);

 protected:
  Cell cell(const BreakdownRow& row, int column) const override;
};

struct FileRow {
  enum class Status { kLoading, kLoaded, kFailed };
  QString path;
  Status status = Status::kLoading;
  SourceKind kind = SourceKind::kModel;  // when loaded
  QString error;                         // when failed
  // Loaded, but left out of the pages: why (its settings or model differ from the window's).
  QString mismatch;
};

class FilesModel : public RowTableModel<FileRow> {
 public:
  enum Column { kFile, kKind, kStatus, kColumnCount };
  explicit FilesModel(QObject* parent = nullptr);

 protected:
  Cell cell(const FileRow& row, int column) const override;
};

}  // namespace memplan::gui
