#include "lifetime_view.h"

#include <QFontMetrics>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>
#include <unordered_map>

#include "common.h"

namespace memplan::gui {

namespace {
constexpr int kRowHeight = 16;
constexpr int kTop = 44;      // title and the phase strip
constexpr int kBottom = 56;   // axis and legend
constexpr int kLabelWidth = 300;
constexpr int kRight = 16;
}  // namespace

LifetimeView::LifetimeView(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setAutoFillBackground(true);
  QPalette p = palette();
  p.setColor(QPalette::Window, Qt::white);
  setPalette(p);
  empty_message_ = QStringLiteral("Open a model (.onnx) to see tensor lifetimes: JSON files carry only the timeline.");
}

void LifetimeView::setSchedule(std::shared_ptr<const Schedule> schedule, std::shared_ptr<const TimelineData> timeline,
                               std::vector<TensorId> bottlenecks, std::vector<TensorId> checkpoints,
                               const QString& title) {
  schedule_ = std::move(schedule);
  timeline_ = std::move(timeline);
  bottlenecks_ = std::move(bottlenecks);
  checkpoints_ = std::move(checkpoints);
  title_ = title;
  first_ = 0;
  last_ = -1;
  recompute();
}

void LifetimeView::setRange(int64_t first, int64_t last) {
  first_ = std::max<int64_t>(0, first);
  last_ = last;
  recompute();
}

void LifetimeView::setMaxBuffers(int n) {
  options_.max_buffers = static_cast<size_t>(std::max(1, n));
  recompute();
}

void LifetimeView::setIncludePersistent(bool on) {
  options_.include_persistent = on;
  recompute();
}

void LifetimeView::setEmptyMessage(const QString& text) {
  empty_message_ = text;
  update();
}

void LifetimeView::recompute() {
  spans_.clear();
  span_row_.clear();
  row_of_.clear();
  if (schedule_ && !schedule_->steps.empty()) {
    const int64_t n = static_cast<int64_t>(schedule_->steps.size());
    if (last_ < 0 || last_ >= n) last_ = n - 1;
    if (first_ > last_) first_ = 0;
    options_.first_step = static_cast<int32_t>(first_);
    options_.last_step = static_cast<int32_t>(last_);
    spans_ = Lifetimes(*schedule_, bottlenecks_, checkpoints_, options_);
    std::unordered_map<BufferId, int> row;
    for (const LifetimeSpan& s : spans_) {
      auto [it, inserted] = row.emplace(s.buffer, static_cast<int>(row_of_.size()));
      if (inserted) row_of_.push_back(s.buffer);
      span_row_.push_back(it->second);
    }
  }
  updateGeometry();
  update();
}

QSize LifetimeView::sizeHint() const { return QSize(900, kTop + kBottom + std::max<int>(rows(), 8) * kRowHeight); }

QRectF LifetimeView::barRect(const LifetimeSpan& s, int row) const {
  const double x0 = kLabelWidth, x1 = width() - kRight;
  const double span = static_cast<double>(last_ - first_ + 1);
  auto x = [&](double step) { return x0 + (step - first_) / span * (x1 - x0); };
  double a = x(std::max<double>(s.begin, first_)), b = x(std::min<double>(s.end, last_) + 1);
  return QRectF(a, kTop + row * kRowHeight + 2, std::max(2.0, b - a), kRowHeight - 4);
}

void LifetimeView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  p.setRenderHint(QPainter::Antialiasing, false);
  QFont bold = font();
  bold.setBold(true);
  p.setFont(bold);
  p.drawText(QRect(8, 4, width() - 16, 20), Qt::AlignLeft | Qt::AlignVCenter,
             title_.isEmpty() ? QStringLiteral("Tensor lifetimes") : title_);
  p.setFont(font());
  if (!schedule_ || spans_.empty()) {
    p.setPen(Qt::darkGray);
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, schedule_ ? QStringLiteral("No tensors in this range.") : empty_message_);
    return;
  }
  const double x0 = kLabelWidth, x1 = width() - kRight;
  const int plot_bottom = kTop + rows() * kRowHeight;
  const double span = static_cast<double>(last_ - first_ + 1);
  auto x = [&](double step) { return x0 + (step - first_) / span * (x1 - x0); };

  // Phase strip and shading.
  if (timeline_ && static_cast<int64_t>(timeline_->phases.size()) > last_) {
    int64_t i = first_;
    while (i <= last_) {
      int64_t j = i;
      while (j + 1 <= last_ && timeline_->phases[j + 1] == timeline_->phases[i]) ++j;
      QRectF band(x(i), kTop - 14, x(j + 1) - x(i), plot_bottom - kTop + 14);
      QColor c = PhaseColor(timeline_->phases[i]);
      p.fillRect(band, c);
      QRectF strip(x(i), kTop - 14, x(j + 1) - x(i), 12);
      p.fillRect(strip, c.darker(115));
      if (strip.width() > 60) {
        p.setPen(Qt::black);
        p.drawText(strip, Qt::AlignCenter, QString::fromLatin1(PhaseName(timeline_->phases[i])));
      }
      i = j + 1;
    }
  }

  // Row labels and bars.
  QFontMetrics fm(font());
  for (int r = 0; r < rows(); ++r) {
    const Buffer& b = schedule_->buffers[row_of_[r]];
    QString label = QStringLiteral("%1  %2").arg(BytesQ(b.bytes), Q(b.name));
    p.setPen(Qt::black);
    p.drawText(QRect(6, kTop + r * kRowHeight, kLabelWidth - 10, kRowHeight), Qt::AlignLeft | Qt::AlignVCenter,
               fm.elidedText(label, Qt::ElideMiddle, kLabelWidth - 10));
    if (r % 2) p.fillRect(QRectF(x0, kTop + r * kRowHeight, x1 - x0, kRowHeight), QColor(0, 0, 0, 10));
  }
  for (size_t k = 0; k < spans_.size(); ++k) {
    const LifetimeSpan& s = spans_[k];
    QRectF r = barRect(s, span_row_[k]);
    QColor c = CategoryColor(s.category);
    p.fillRect(r, c);
    if (s.recomputed) p.fillRect(r, QBrush(Qt::white, Qt::BDiagPattern));
    if (s.bottleneck) {
      p.setPen(QPen(QColor(0xc0, 0x10, 0x10), 2));
      p.setBrush(Qt::NoBrush);
      p.drawRect(r.adjusted(1, 1, -1, -1));
    }
    if (s.checkpoint) {
      p.setPen(Qt::NoPen);
      p.setBrush(Qt::black);
      QPointF c0(r.left() + 5, r.center().y());
      QPolygonF diamond({c0 + QPointF(0, -5), c0 + QPointF(5, 0), c0 + QPointF(0, 5), c0 + QPointF(-5, 0)});
      p.drawPolygon(diamond);
    }
  }

  // Axis.
  p.setPen(Qt::black);
  p.drawLine(QPointF(x0, plot_bottom), QPointF(x1, plot_bottom));
  const int ticks = std::max(2, static_cast<int>((x1 - x0) / 90));
  for (int t = 0; t <= ticks; ++t) {
    double step = first_ + (last_ - first_) * static_cast<double>(t) / ticks;
    double xx = x(step + 0.5);
    p.drawLine(QPointF(xx, plot_bottom), QPointF(xx, plot_bottom + 4));
    p.drawText(QRectF(xx - 40, plot_bottom + 4, 80, 14), Qt::AlignCenter, QString::number(static_cast<qint64>(step)));
  }
  p.drawText(QRectF(x0, plot_bottom + 16, x1 - x0, 14), Qt::AlignCenter, QStringLiteral("schedule step"));

  // Legend: categories present, then the marks.
  double lx = 8;
  const double ly = plot_bottom + 34;
  std::vector<char> present(kNumMemoryCategories, 0);
  for (const LifetimeSpan& s : spans_) present[static_cast<int>(s.category)] = 1;
  auto legend = [&](const QString& text, auto&& draw_swatch) {
    draw_swatch(QRectF(lx, ly + 2, 14, 10));
    p.setPen(Qt::black);
    p.drawText(QPointF(lx + 18, ly + 11), text);
    lx += 26 + fm.horizontalAdvance(text);
  };
  for (MemoryCategory c : kStackOrder) {
    if (!present[static_cast<int>(c)]) continue;
    legend(CategoryLabel(c), [&](QRectF r) { p.fillRect(r, CategoryColor(c)); });
  }
  legend(QStringLiteral("bottleneck"), [&](QRectF r) {
    p.setPen(QPen(QColor(0xc0, 0x10, 0x10), 2));
    p.setBrush(Qt::NoBrush);
    p.drawRect(r);
  });
  legend(QStringLiteral("checkpoint"), [&](QRectF r) {
    p.setPen(Qt::NoPen);
    p.setBrush(Qt::black);
    QPointF c0 = r.center();
    p.drawPolygon(QPolygonF({c0 + QPointF(0, -5), c0 + QPointF(5, 0), c0 + QPointF(0, 5), c0 + QPointF(-5, 0)}));
  });
  legend(QStringLiteral("recomputed"), [&](QRectF r) {
    p.fillRect(r, Qt::gray);
    p.fillRect(r, QBrush(Qt::white, Qt::BDiagPattern));
  });
}

void LifetimeView::mouseMoveEvent(QMouseEvent* e) {
  for (size_t k = 0; k < spans_.size(); ++k) {
    if (!barRect(spans_[k], span_row_[k]).adjusted(-1, -2, 1, 2).contains(e->position())) continue;
    const LifetimeSpan& s = spans_[k];
    QString text = QStringLiteral("<b>%1</b><br>%2 · %3<br>alive steps %4–%5")
                       .arg(Q(s.name).toHtmlEscaped(), BytesQ(s.bytes), CategoryLabel(s.category))
                       .arg(s.begin)
                       .arg(s.end);
    if (timeline_ && s.begin < static_cast<int32_t>(timeline_->events.size())) {
      text += QStringLiteral("<br>from: %1").arg(Q(timeline_->events[s.begin]).toHtmlEscaped());
      if (s.end < static_cast<int32_t>(timeline_->events.size()))
        text += QStringLiteral("<br>to: %1").arg(Q(timeline_->events[s.end]).toHtmlEscaped());
    }
    if (s.bottleneck) text += QStringLiteral("<br><span style='color:#c01010'>bottleneck tensor</span>");
    if (s.checkpoint) text += QStringLiteral("<br>checkpoint (kept across segments)");
    if (s.recomputed) text += QStringLiteral("<br>recomputed");
    QToolTip::showText(e->globalPosition().toPoint(), text, this);
    return;
  }
  QToolTip::hideText();
}

}  // namespace memplan::gui
