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
constexpr int kTop = 44;     // title and the phase strip
constexpr int kBottom = 56;  // axis and legend
constexpr int kLabelWidth = 300;
constexpr int kRight = 16;
}  // namespace

LifetimeView::LifetimeView(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setAutoFillBackground(true);
  QPalette p = palette();
  p.setColor(QPalette::Window, Qt::white);
  setPalette(p);
  empty_message_ = QStringLiteral(
      "Open a model (.onnx) to see tensor lifetimes: JSON files carry only the timeline.");
}

void LifetimeView::setSchedule(std::shared_ptr<const Schedule> schedule,
                               std::shared_ptr<const TimelineData> timeline, LifetimeMarks marks,
                               const QString& title) {
  schedule_ = std::move(schedule);
  timeline_ = std::move(timeline);
  marks_ = std::move(marks);
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
    spans_ = Lifetimes(*schedule_, marks_, options_);
    std::unordered_map<BufferId, int> row;
    for (const LifetimeSpan& s : spans_) {
      auto [it, inserted] = row.emplace(s.row, static_cast<int>(row_of_.size()));
      if (inserted) row_of_.push_back(s.row);
      span_row_.push_back(it->second);
    }
  }
  updateGeometry();
  update();
}

QSize LifetimeView::sizeHint() const {
  return QSize(900, kTop + kBottom + std::max<int>(rows(), 8) * kRowHeight);
}

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
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
               schedule_ ? QStringLiteral("No tensors in this range.") : empty_message_);
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

  // Row labels and bars. A dropped storage's row: label in the selective color; its spans
  // (forward, then each recompute) joined by a dashed line over the steps it is not held.
  QFontMetrics fm(font());
  const QColor selective = SelectiveColor();
  std::vector<char> row_dropped(rows(), 0), row_offloaded(rows(), 0);
  std::vector<std::vector<const LifetimeSpan*>> dropped_spans(rows());
  for (size_t k = 0; k < spans_.size(); ++k) {
    if (spans_[k].offloaded) row_offloaded[span_row_[k]] = 1;
    if (!spans_[k].dropped) continue;
    row_dropped[span_row_[k]] = 1;
    dropped_spans[span_row_[k]].push_back(&spans_[k]);
  }
  for (int r = 0; r < rows(); ++r) {
    const Buffer& b = schedule_->buffers[row_of_[r]];
    QString label = QStringLiteral("%1  %2").arg(BytesQ(b.bytes), Q(b.name));
    p.setPen(row_dropped[r] ? selective : row_offloaded[r] ? HostColor() : QColor(Qt::black));
    p.drawText(QRect(6, kTop + r * kRowHeight, kLabelWidth - 10, kRowHeight),
               Qt::AlignLeft | Qt::AlignVCenter,
               fm.elidedText(label, Qt::ElideMiddle, kLabelWidth - 10));
    if (r % 2)
      p.fillRect(QRectF(x0, kTop + r * kRowHeight, x1 - x0, kRowHeight), QColor(0, 0, 0, 10));
  }
  for (int r = 0; r < rows(); ++r) {
    std::vector<const LifetimeSpan*>& d = dropped_spans[r];
    std::sort(d.begin(), d.end(),
              [](const LifetimeSpan* a, const LifetimeSpan* b) { return a->begin < b->begin; });
    for (size_t i = 0; i + 1 < d.size(); ++i) {
      const double a = x(std::max<double>(d[i]->end + 1, first_)),
                   b = x(std::min<double>(d[i + 1]->begin, last_ + 1));
      if (b <= a) continue;
      const double y = kTop + r * kRowHeight + kRowHeight / 2.0;
      p.setPen(QPen(selective, 1.5, Qt::DashLine));
      p.drawLine(QPointF(a, y), QPointF(b, y));
    }
  }
  // Host spans last: drawn over the device copy they overlap while the copy is in flight.
  std::vector<size_t> order(spans_.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_partition(order.begin(), order.end(), [&](size_t k) { return !spans_[k].host; });
  const QColor host = HostColor();
  for (size_t k : order) {
    const LifetimeSpan& s = spans_[k];
    QRectF r = barRect(s, span_row_[k]);
    QColor c = CategoryColor(s.category);
    if (s.host) {
      // Pinned host memory, not the device's: the lower half of the row, hatched, outlined.
      r.setTop(r.center().y() - 1);
      p.fillRect(r, host.lighter(160));
      p.fillRect(r, QBrush(host, Qt::FDiagPattern));
      p.setPen(QPen(host, 1.5));
      p.setBrush(Qt::NoBrush);
      p.drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
      continue;
    }
    if (s.offloaded) {
      // The device copy before the offload and after the prefetch: outlined in the host color,
      // the prefetched one marked where it comes back.
      p.fillRect(r, c);
      p.setPen(QPen(host, 1.5));
      p.setBrush(Qt::NoBrush);
      p.drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
      if (s.prefetched && s.begin >= first_)
        p.fillRect(QRectF(r.left(), r.top() - 1, 3, r.height() + 2), host);
      continue;
    }
    if (s.dropped && s.recomputed) {
      // Recomputed in the backward: the selective color, hatched.
      p.fillRect(r, selective.lighter(140));
      p.fillRect(r, QBrush(Qt::white, Qt::BDiagPattern));
    } else {
      p.fillRect(r, c);
      if (s.recomputed) p.fillRect(r, QBrush(Qt::white, Qt::BDiagPattern));
    }
    if (s.dropped) {
      // Outlined; the forward span ends in a bar where the storage is dropped.
      p.setPen(QPen(selective, 1.5));
      p.setBrush(Qt::NoBrush);
      p.drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
      if (!s.recomputed && s.end <= last_)
        p.fillRect(QRectF(r.right() - 3, r.top() - 1, 3, r.height() + 2), selective);
    }
    if (s.bottleneck) {
      p.setPen(QPen(QColor(0xc0, 0x10, 0x10), 2));
      p.setBrush(Qt::NoBrush);
      p.drawRect(r.adjusted(1, 1, -1, -1));
    }
    if (s.checkpoint) {
      p.setPen(Qt::NoPen);
      p.setBrush(Qt::black);
      QPointF c0(r.left() + 5, r.center().y());
      QPolygonF diamond(
          {c0 + QPointF(0, -5), c0 + QPointF(5, 0), c0 + QPointF(0, 5), c0 + QPointF(-5, 0)});
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
    p.drawText(QRectF(xx - 40, plot_bottom + 4, 80, 14), Qt::AlignCenter,
               QString::number(static_cast<qint64>(step)));
  }
  p.drawText(QRectF(x0, plot_bottom + 16, x1 - x0, 14), Qt::AlignCenter,
             QStringLiteral("schedule step"));

  // Legend: categories present, then the marks.
  double lx = 8;
  const double ly = plot_bottom + 34;
  std::vector<char> present(kNumMemoryCategories, 0);
  for (const LifetimeSpan& s : spans_) present[static_cast<int>(s.category)] = 1;
  auto legend = [&](const QString& text, auto&& draw_swatch, double swatch_width = 14) {
    draw_swatch(QRectF(lx, ly + 2, swatch_width, 10));
    p.setPen(Qt::black);
    p.drawText(QPointF(lx + swatch_width + 4, ly + 11), text);
    lx += swatch_width + 12 + fm.horizontalAdvance(text);
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
    p.drawPolygon(QPolygonF(
        {c0 + QPointF(0, -5), c0 + QPointF(5, 0), c0 + QPointF(0, 5), c0 + QPointF(-5, 0)}));
  });
  legend(QStringLiteral("recomputed"), [&](QRectF r) {
    p.fillRect(r, Qt::gray);
    p.fillRect(r, QBrush(Qt::white, Qt::BDiagPattern));
  });
  if (std::any_of(spans_.begin(), spans_.end(), [](const LifetimeSpan& s) { return s.host; })) {
    // An offloaded storage: its device copy, then pinned host memory, then prefetched back.
    legend(
        QStringLiteral("offloaded: pinned host memory"),
        [&](QRectF r) {
          QRectF dev(r.left(), r.top(), 10, r.height()),
              back(r.right() - 10, r.top(), 10, r.height());
          QRectF on_host(dev.right() - 2, r.center().y() - 1, back.left() - dev.right() + 4,
                         r.bottom() - r.center().y() + 1);
          p.fillRect(dev, CategoryColor(MemoryCategory::kActivation));
          p.fillRect(back, CategoryColor(MemoryCategory::kActivation));
          p.setPen(QPen(host, 1.5));
          p.setBrush(Qt::NoBrush);
          p.drawRect(dev);
          p.drawRect(back);
          p.fillRect(on_host, host.lighter(160));
          p.fillRect(on_host, QBrush(host, Qt::FDiagPattern));
          p.drawRect(on_host);
        },
        44);
  }
  if (std::any_of(spans_.begin(), spans_.end(), [](const LifetimeSpan& s) { return s.dropped; })) {
    // A dropped storage: forward span, dropped, the gap, recomputed in the backward.
    legend(
        QStringLiteral("dropped after the forward, recomputed"),
        [&](QRectF r) {
          QRectF fwd(r.left(), r.top(), 12, r.height()),
              again(r.right() - 12, r.top(), 12, r.height());
          p.fillRect(fwd, CategoryColor(MemoryCategory::kActivation));
          p.setPen(QPen(selective, 1.5));
          p.setBrush(Qt::NoBrush);
          p.drawRect(fwd);
          p.fillRect(QRectF(fwd.right() - 3, fwd.top() - 1, 3, fwd.height() + 2), selective);
          p.setPen(QPen(selective, 1.5, Qt::DashLine));
          p.drawLine(QPointF(fwd.right(), r.center().y()), QPointF(again.left(), r.center().y()));
          p.fillRect(again, selective.lighter(140));
          p.fillRect(again, QBrush(Qt::white, Qt::BDiagPattern));
          p.setPen(QPen(selective, 1.5));
          p.drawRect(again);
        },
        44);
  }
}

QString LifetimeView::describeSpan(const LifetimeSpan& s) const {
  QString text = QStringLiteral("<b>%1</b><br>%2 · %3<br>alive steps %4–%5")
                     .arg(Q(s.name).toHtmlEscaped(), BytesQ(s.bytes), CategoryLabel(s.category))
                     .arg(s.begin)
                     .arg(s.end);
  if (timeline_ && s.begin < static_cast<int32_t>(timeline_->events.size())) {
    text += QStringLiteral("<br>from: %1").arg(Q(timeline_->events[s.begin]).toHtmlEscaped());
    if (s.end < static_cast<int32_t>(timeline_->events.size()))
      text += QStringLiteral("<br>to: %1").arg(Q(timeline_->events[s.end]).toHtmlEscaped());
  }
  if (s.bottleneck)
    text += QStringLiteral("<br><span style='color:#c01010'>bottleneck tensor</span>");
  if (s.checkpoint) text += QStringLiteral("<br>checkpoint (kept across segments)");
  if (s.offloaded) {
    text += QStringLiteral("<br><span style='color:%1'><b>offloaded</b>: %2</span>")
                .arg(HostColor().name(),
                     s.host ? QStringLiteral("pinned host memory (not device memory), from the "
                                             "offload's start to the prefetch's wait")
                     : s.prefetched
                         ? QStringLiteral("prefetched back to the device for the backward")
                         : QStringLiteral("the device copy, freed once the offload completes"));
    QStringList spans;
    for (const LifetimeSpan& o : spans_) {
      if (o.row == s.row && o.offloaded)
        spans << QStringLiteral("%1 %2–%3")
                     .arg(o.host ? QStringLiteral("host") : QStringLiteral("device"))
                     .arg(o.begin)
                     .arg(o.end);
    }
    text += QStringLiteral("<br>steps: %1").arg(spans.join(QStringLiteral(", ")));
  } else if (s.dropped) {
    text += QStringLiteral("<br><span style='color:%1'><b>%2</b>: %3</span>")
                .arg(SelectiveColor().name(), RecomputedText(s.recompute_count),
                     s.recomputed
                         ? QStringLiteral("this span is a recompute in the backward")
                         : QStringLiteral(
                               "this span is the forward; dropped after its last forward reader"));
    // The storage's other spans, from the analyzer's lifetimes.
    QStringList spans;
    for (const LifetimeSpan& o : spans_) {
      if (o.row == s.row && o.dropped) spans << QStringLiteral("%1–%2").arg(o.begin).arg(o.end);
    }
    if (spans.size() > 1)
      text += QStringLiteral("<br>held during steps %1").arg(spans.join(QStringLiteral(", ")));
  } else if (s.kept) {
    text += QStringLiteral("<br><b>kept</b>: saved from the forward for the backward");
  } else if (s.recomputed) {
    text += QStringLiteral("<br>recomputed");
  }
  return text;
}

void LifetimeView::mouseMoveEvent(QMouseEvent* e) {
  for (size_t k = 0; k < spans_.size(); ++k) {
    if (!barRect(spans_[k], span_row_[k]).adjusted(-1, -2, 1, 2).contains(e->position())) continue;
    QToolTip::showText(e->globalPosition().toPoint(), describeSpan(spans_[k]), this);
    return;
  }
  QToolTip::hideText();
}

}  // namespace memplan::gui
