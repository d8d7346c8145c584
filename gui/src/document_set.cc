#include "document_set.h"

#include <QFileInfo>

namespace memplan::gui {

int DocumentSet::add(const QString& path) {
  paths_ << path;
  slots_.push_back(nullptr);
  errors_.push_back({});
  return static_cast<int>(slots_.size()) - 1;
}

void DocumentSet::setLoaded(int slot, ItemPtr item) {
  slots_[slot] = std::move(item);
  errors_[slot].clear();
}

void DocumentSet::setFailed(int slot, const QString& message) {
  slots_[slot].reset();
  errors_[slot] = message;
}

void DocumentSet::setLoading(int slot) { errors_[slot].clear(); }

std::vector<ItemPtr> DocumentSet::items() const {
  std::vector<ItemPtr> out;
  for (const ItemPtr& p : slots_) if (p) out.push_back(p);
  if (explorer_plan_) out.push_back(explorer_plan_);
  return out;
}

ItemPtr DocumentSet::baseItem() const {
  ItemPtr best;
  for (const ItemPtr& p : slots_) {
    if (!p || (p->kind != SourceKind::kModel && p->kind != SourceKind::kAnalysis)) continue;
    if (!best || (best->kind == SourceKind::kAnalysis && p->kind == SourceKind::kModel)) best = p;
  }
  return best;
}

ItemPtr DocumentSet::planItem() const {
  if (explorer_plan_) return explorer_plan_;
  ItemPtr last;
  for (const ItemPtr& p : slots_) if (p && p->kind == SourceKind::kPlan) last = p;
  return last;
}

ItemPtr DocumentSet::runItem() const {
  ItemPtr last;
  for (const ItemPtr& p : slots_) if (p && p->kind == SourceKind::kRun) last = p;
  return last;
}

std::vector<ItemPtr> DocumentSet::profileItems() const {
  std::vector<ItemPtr> out;
  for (const ItemPtr& p : slots_) if (p && p->profile) out.push_back(p);
  return out;
}

ItemPtr DocumentSet::profileFor(const ItemPtr& item) const {
  std::vector<ItemPtr> profiles = profileItems();
  if (profiles.empty()) return nullptr;
  if (item) {
    const QString model = QFileInfo(QString::fromStdString(item->model)).fileName();
    for (auto it = profiles.rbegin(); it != profiles.rend(); ++it) {
      if (!model.isEmpty() && QFileInfo(QString::fromStdString((*it)->model)).fileName() == model) return *it;
    }
  }
  return profiles.back();
}

std::vector<ItemPtr> DocumentSet::compareItems() const {
  std::vector<ItemPtr> out = timelineItems();
  for (const ItemPtr& p : profileItems()) out.push_back(p);
  return out;
}

std::vector<ItemPtr> DocumentSet::timelineItems() const {
  std::vector<ItemPtr> out;
  for (const ItemPtr& p : items()) if (p->timeline || p->measured) out.push_back(p);
  return out;
}

std::vector<FileRow> DocumentSet::fileRows() const {
  std::vector<FileRow> rows;
  for (int i = 0; i < paths_.size(); ++i) {
    FileRow r;
    r.path = paths_[i];
    if (slots_[i]) {
      r.status = FileRow::Status::kLoaded;
      r.kind = slots_[i]->kind;
    } else if (!errors_[i].isEmpty()) {
      r.status = FileRow::Status::kFailed;
      r.error = errors_[i];
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace memplan::gui
