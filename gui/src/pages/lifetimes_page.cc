#include "lifetimes_page.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollArea>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "common.h"
#include "lifetime_view.h"
#include "models/storage_model.h"
#include "models/summary_models.h"
#include "pages/page_util.h"

namespace memplan::gui {

LifetimesPage::LifetimesPage(QWidget* parent) : QWidget(parent) {
  auto* v = new QVBoxLayout(this);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(QStringLiteral("Largest")));
  count_ = new QSpinBox;
  count_->setRange(5, 500);
  count_->setValue(40);
  controls->addWidget(count_);
  controls->addWidget(new QLabel(QStringLiteral("tensors")));
  persistent_ =
      new QCheckBox(QStringLiteral("include parameters, gradients, optimizer state, inputs"));
  controls->addWidget(persistent_);
  controls->addStretch(1);
  auto* hint = new QLabel(QStringLiteral("a range dragged on the timeline filters this view"));
  hint->setStyleSheet(QStringLiteral("color: gray"));
  controls->addWidget(hint);
  v->addLayout(controls);
  auto* split = new QSplitter(Qt::Vertical);
  view_ = new LifetimeView;
  auto* scroll = new QScrollArea;
  scroll->setWidget(view_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  split->addWidget(scroll);
  // A selective plan's storages: kept or recomputed, with their spans.
  storage_box_ = new QWidget;
  auto* sv = new QVBoxLayout(storage_box_);
  sv->setContentsMargins(0, 0, 0, 0);
  storage_label_ = new QLabel;
  storage_label_->setTextFormat(Qt::RichText);
  sv->addWidget(storage_label_);
  storage_model_ = new StorageModel(this);
  storage_proxy_ = new QSortFilterProxyModel(this);
  storage_proxy_->setSourceModel(storage_model_);
  storage_proxy_->setSortRole(Qt::UserRole);
  QTableView* table = MakeTable(storage_proxy_, storage_box_, /*sortable=*/true);
  table->setColumnWidth(StorageModel::kTensor, 320);
  table->setColumnWidth(StorageModel::kBytes, 100);
  table->setColumnWidth(StorageModel::kDecision, 170);
  table->setColumnWidth(StorageModel::kForward, 120);
  table->sortByColumn(StorageModel::kBytes, Qt::DescendingOrder);
  sv->addWidget(table, 1);
  split->addWidget(storage_box_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);
  storage_box_->hide();
  v->addWidget(split, 1);
  connect(count_, &QSpinBox::valueChanged, view_, &LifetimeView::setMaxBuffers);
  connect(persistent_, &QCheckBox::toggled, view_, &LifetimeView::setIncludePersistent);
}

void LifetimesPage::refresh(const ItemPtr& item, const ItemPtr& fallback) {
  ItemPtr shown = item && item->schedule           ? item
                  : fallback && fallback->schedule ? fallback
                                                   : nullptr;
  if (!shown) {
    view_->setSchedule(nullptr, nullptr, {}, QStringLiteral("Tensor lifetimes"));
    storage_model_->setRows({});
    storage_box_->hide();
    return;
  }
  LifetimeMarks marks;
  marks.bottlenecks = shown->bottleneck_ids;
  marks.checkpoints = shown->checkpoint_ids;
  marks.recomputed = shown->recomputed_ids;
  for (const StorageDecision& d : shown->storages) {
    if (d.saved && !d.recomputed && !d.offloaded) marks.kept.push_back(d.tensor);
  }
  QString title = QStringLiteral("Largest tensors of %1 over the schedule").arg(ItemLabel(*shown));
  if (shown->offload) {
    title += QStringLiteral(": %1 storages offloaded to pinned host memory (%2), host peak %3")
                 .arg(shown->offloaded.size())
                 .arg(BytesQ(shown->offloaded_bytes), BytesQ(shown->predicted_host_peak_bytes));
  }
  if (IsSelective(*shown) && !shown->storages.empty()) {
    const SelectiveCounts c = CountSelective(shown->storages);
    title += (shown->offload ? QStringLiteral("; ") : QStringLiteral(": ")) +
             QStringLiteral("%1 of %2 saved activations kept, %3 tensors recomputed")
                 .arg(c.kept)
                 .arg(c.saved)
                 .arg(c.recomputed());
    storage_label_->setText(
        QStringLiteral(
            "<b>Kept and recomputed tensors</b> of the selective plan: %1 of %2 saved "
            "activations kept (%3), %4 recomputed (%5)%6; %7 recomputations in the backward")
            .arg(c.kept)
            .arg(c.saved)
            .arg(BytesQ(c.kept_bytes))
            .arg(c.recomputed_saved)
            .arg(BytesQ(c.recomputed_saved_bytes))
            .arg(c.recomputed_unsaved > 0
                     ? QStringLiteral(", and %1 unsaved storages (%2) as inputs of those")
                           .arg(c.recomputed_unsaved)
                           .arg(BytesQ(c.recomputed_unsaved_bytes))
                     : QString())
            .arg(c.recomputes) +
        (c.offloaded > 0 ? QStringLiteral("; %1 offloaded to pinned host memory (%2)")
                               .arg(c.offloaded)
                               .arg(BytesQ(c.offloaded_bytes))
                         : QString()));
    storage_model_->setRows(shown->storages);
    storage_box_->show();
  } else {
    storage_model_->setRows({});
    storage_box_->hide();
  }
  view_->setSchedule(shown->schedule, shown->timeline, std::move(marks), title);
}

}  // namespace memplan::gui
