#include "document_set.h"

#include <QFileInfo>

#include "common.h"

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

const Item* DocumentSet::modelForChecks() const {
  const Item* model = nullptr;
  for (const ItemPtr& p : slots_)
    if (p && p->kind == SourceKind::kModel) model = p.get();
  return model;
}

std::optional<ModelOptions> DocumentSet::fileSettings(const ModelOptions& defaults,
                                                      QString* source) const {
  std::optional<ModelOptions> settings;
  for (const ItemPtr& p : slots_) {
    if (!p || p->kind == SourceKind::kModel) continue;
    if (std::optional<ModelOptions> s = SettingsOf(*p, defaults)) {
      if (source) *source = Q(p->title);
      settings = s;
      break;
    }
  }
  if (!settings) return settings;
  // The device: of the first file that says where it ran or what it predicts for (a plan made
  // before `--device` existed says neither; the run beside it does).
  for (const ItemPtr& p : slots_) {
    if (!p || p->kind == SourceKind::kModel || (p->predicted_for.empty() && p->device.empty()))
      continue;
    const std::string& gpu = !p->predicted_for.empty() ? p->predicted_for : p->device;
    settings->device = gpu.rfind("cuda", 0) == 0 ? "cuda" : "";
    break;
  }
  // The allocator mode: of the first file on CUDA that recorded one.
  for (const ItemPtr& p : slots_) {
    if (!p || settings->device.empty() || p->allocator_mode.empty()) continue;
    settings->allocator_mode = p->allocator_mode;
    break;
  }
  return settings;
}

QStringList DocumentSet::mismatch(int slot) const {
  if (slot < 0 || slot >= static_cast<int>(slots_.size())) return {};
  return mismatchOf(slots_[slot]);
}

QStringList DocumentSet::mismatchOf(const ItemPtr& item) const {
  QStringList out;
  if (!item || item == explorer_plan_) return out;  // made here, from the open model
  for (const std::string& why : SettingsMismatch(*item, settings_, modelForChecks())) out << Q(why);
  return out;
}

bool DocumentSet::matches(const ItemPtr& item) const { return item && mismatchOf(item).isEmpty(); }

std::vector<ItemPtr> DocumentSet::items() const {
  std::vector<ItemPtr> out;
  for (const ItemPtr& p : slots_)
    if (p) out.push_back(p);
  if (explorer_plan_) out.push_back(explorer_plan_);
  return out;
}

ItemPtr DocumentSet::baseItem() const {
  ItemPtr best;
  for (const ItemPtr& p : slots_) {
    if (!matches(p) || (p->kind != SourceKind::kModel && p->kind != SourceKind::kAnalysis))
      continue;
    if (!best || (best->kind == SourceKind::kAnalysis && p->kind == SourceKind::kModel)) best = p;
  }
  return best;
}

ItemPtr DocumentSet::planItem() const {
  if (explorer_plan_) return explorer_plan_;
  ItemPtr last;
  for (const ItemPtr& p : slots_)
    if (matches(p) && p->kind == SourceKind::kPlan) last = p;
  return last;
}

ItemPtr DocumentSet::runItem() const {
  ItemPtr last;
  for (const ItemPtr& p : slots_)
    if (matches(p) && p->kind == SourceKind::kRun) last = p;
  return last;
}

std::vector<ItemPtr> DocumentSet::profileItems() const {
  std::vector<ItemPtr> out;
  for (const ItemPtr& p : slots_)
    if (p && p->profile) out.push_back(p);
  return out;
}

ItemPtr DocumentSet::profileFor(const ItemPtr& item) const {
  std::vector<ItemPtr> profiles = profileItems();
  std::erase_if(profiles, [this](const ItemPtr& p) { return !matches(p); });
  if (profiles.empty()) return nullptr;
  if (item) {
    const QString model = QFileInfo(QString::fromStdString(item->model)).fileName();
    for (auto it = profiles.rbegin(); it != profiles.rend(); ++it) {
      if (!model.isEmpty() && QFileInfo(QString::fromStdString((*it)->model)).fileName() == model)
        return *it;
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
  for (const ItemPtr& p : items())
    if (p->timeline || p->measured) out.push_back(p);
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
      const QStringList why = mismatch(i);
      if (!why.isEmpty()) {
        r.mismatch =
            QStringLiteral("not combined: %1 (the window's settings, %2, come from %3)")
                .arg(why.join(QStringLiteral("; ")), Q(SettingsText(settings_)), settings_source_);
      }
    } else if (!errors_[i].isEmpty()) {
      r.status = FileRow::Status::kFailed;
      r.error = errors_[i];
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace memplan::gui
