#include "lifetimes_page.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollArea>
#include <QSpinBox>
#include <QVBoxLayout>

#include "common.h"
#include "lifetime_view.h"

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
  persistent_ = new QCheckBox(QStringLiteral("include parameters, gradients, optimizer state, inputs"));
  controls->addWidget(persistent_);
  controls->addStretch(1);
  auto* hint = new QLabel(QStringLiteral("a range dragged on the timeline filters this view"));
  hint->setStyleSheet(QStringLiteral("color: gray"));
  controls->addWidget(hint);
  v->addLayout(controls);
  view_ = new LifetimeView;
  auto* scroll = new QScrollArea;
  scroll->setWidget(view_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  v->addWidget(scroll, 1);
  connect(count_, &QSpinBox::valueChanged, view_, &LifetimeView::setMaxBuffers);
  connect(persistent_, &QCheckBox::toggled, view_, &LifetimeView::setIncludePersistent);
}

void LifetimesPage::refresh(const ItemPtr& item, const ItemPtr& fallback) {
  ItemPtr shown = item && item->schedule ? item : fallback && fallback->schedule ? fallback : nullptr;
  if (shown) {
    view_->setSchedule(shown->schedule, shown->timeline, shown->bottleneck_ids, shown->checkpoint_ids,
                       QStringLiteral("Largest tensors of %1 over the schedule").arg(ItemLabel(*shown)));
  } else {
    view_->setSchedule(nullptr, nullptr, {}, {}, QStringLiteral("Tensor lifetimes"));
  }
}

}  // namespace memplan::gui
