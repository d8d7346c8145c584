#include "timeline_chart.h"

#include <QAreaSeries>
#include <QChart>
#include <QLegendMarker>
#include <QLineSeries>
#include <QMouseEvent>
#include <QPainter>
#include <QRubberBand>
#include <QScatterSeries>
#include <QToolTip>
#include <QValueAxis>
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common.h"

namespace memplan::gui {

namespace {

// Index in an overlay of `m` points for step `x` of an axis of `n` steps.
double Stretch(size_t i, size_t m, int64_t n) {
  if (m <= 1 || n <= 1) return static_cast<double>(i);
  return static_cast<double>(i) * static_cast<double>(n - 1) / static_cast<double>(m - 1);
}

QString FormatAxisLabel(double max_value) {
  return max_value < 10 ? QStringLiteral("%.1f") : QStringLiteral("%.0f");
}

// 1, 2 or 5 times a power of ten, at least `raw` (and at least 1).
double NiceStep(double raw) {
  double p = 1;
  while (p * 10 <= raw) p *= 10;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return std::max(1.0, m * p);
  return std::max(1.0, 10 * p);
}

}  // namespace

TimelineChart::TimelineChart(QWidget* parent) : QChartView(new QChart(), parent) {
  setRenderHint(QPainter::Antialiasing);
  setMouseTracking(true);
  chart()->legend()->setAlignment(Qt::AlignRight);
  chart()->setMargins(QMargins(4, 4, 4, 4));
  chart()->setAnimationOptions(QChart::NoAnimation);
  rubber_ = new QRubberBand(QRubberBand::Rectangle, viewport());
  setMinimumSize(400, 260);
  rebuild();
}

void TimelineChart::setPrimary(std::shared_ptr<const TimelineData> timeline, const QString& title) {
  primary_ = std::move(timeline);
  title_ = title;
  first_ = 0;
  last_ = -1;
  rebuild();
}

void TimelineChart::setOverlays(std::vector<Overlay> overlays) {
  overlays_ = std::move(overlays);
  rebuild();
}

void TimelineChart::setBudget(int64_t budget_bytes) {
  if (budget_bytes == budget_) return;
  budget_ = budget_bytes;
  rebuild();
}

void TimelineChart::setCompactLegend(bool compact) {
  compact_legend_ = compact;
  rebuild();
}

void TimelineChart::setMarks(std::vector<Mark> marks) {
  marks_ = std::move(marks);
  rebuild();
}

QStringList TimelineChart::seriesNames() const {
  QStringList names;
  for (QAbstractSeries* s : chart()->series()) names << s->name();
  return names;
}

void TimelineChart::resizeEvent(QResizeEvent* e) {
  QChartView::resizeEvent(e);
  // The step axis keeps about one tick label per 110 pixels (no rebuild: only the interval).
  if (std::abs(width() - tick_width_) <= 80) return;
  tick_width_ = width();
  for (QAbstractAxis* a : chart()->axes(Qt::Horizontal)) {
    if (auto* ax = qobject_cast<QValueAxis*>(a))
      ax->setTickInterval(NiceStep((ax->max() - ax->min()) / std::clamp(width() / 110, 3, 10)));
  }
}

void TimelineChart::setTitle(const QString& title) {
  title_ = title;
  chart()->setTitle(title_);
}

void TimelineChart::setMaxPoints(size_t max_points) {
  max_points_ = std::max<size_t>(16, max_points);
  rebuild();
}

int64_t TimelineChart::steps() const {
  if (primary_) return static_cast<int64_t>(primary_->size());
  size_t n = 0;
  for (const Overlay& o : overlays_)
    if (o.data) n = std::max(n, o.data->size());
  return static_cast<int64_t>(n);
}

void TimelineChart::setRange(int64_t first, int64_t last) {
  int64_t n = steps();
  if (n == 0) return;
  first = std::clamp<int64_t>(first, 0, n - 1);
  last = std::clamp<int64_t>(last, 0, n - 1);
  if (last < first) std::swap(first, last);
  if (last == first) last = std::min(n - 1, first + 1);
  first_ = first;
  last_ = last;
  rebuild();
  emit rangeChanged(first_, last_);
}

void TimelineChart::resetRange() {
  first_ = 0;
  last_ = -1;
  rebuild();
  emit rangeChanged(0, std::max<int64_t>(0, steps() - 1));
}

void TimelineChart::rebuild() {
  QChart* c = chart();
  c->removeAllSeries();
  // The axes live as long as the chart: axes deleted and made again on every change (a
  // timeline's primary, overlays, marks and budget arrive one after another) left stale
  // labels drawn over the new ones in grabbed pictures.
  if (!axis_x_) {
    axis_x_ = new QValueAxis;
    axis_y_ = new QValueAxis;
    c->addAxis(axis_x_, Qt::AlignBottom);
    c->addAxis(axis_y_, Qt::AlignLeft);
  }
  plotted_peak_ = 0;
  plotted_host_peak_ = -1;
  plotted_points_ = 0;
  c->setTitle(title_);
  const int64_t n = steps();
  axis_x_->setVisible(n > 0);
  axis_y_->setVisible(n > 0);
  if (n == 0) {
    c->setTitle(title_.isEmpty() ? QStringLiteral("No timeline loaded")
                                 : title_ + QStringLiteral(" — no timeline"));
    return;
  }
  if (last_ < 0 || last_ >= n) last_ = n - 1;
  if (first_ > last_) first_ = 0;
  const int64_t first = first_, last = last_;

  // The highest value in range, from the exact data.
  int64_t max_bytes = std::max<int64_t>(budget_, 1);
  if (primary_) {
    for (int64_t i = first; i <= last; ++i) max_bytes = std::max(max_bytes, primary_->bytes[i]);
    if (static_cast<int64_t>(primary_->reserved.size()) == n) {
      for (int64_t i = first; i <= last; ++i)
        max_bytes = std::max(max_bytes, primary_->reserved[i]);
    }
    if (static_cast<int64_t>(primary_->host_bytes.size()) == n) {
      for (int64_t i = first; i <= last; ++i)
        max_bytes = std::max(max_bytes, primary_->host_bytes[i]);
    }
  }
  for (const Mark& m : marks_) max_bytes = std::max(max_bytes, m.bytes);
  for (const Overlay& o : overlays_) {
    if (!o.data) continue;
    const size_t m = o.data->size();
    for (size_t i = 0; i < m; ++i) {
      double x = Stretch(i, m, n);
      if (x >= first - 1 && x <= last + 1) max_bytes = std::max(max_bytes, o.data->bytes[i]);
    }
  }
  const ByteUnit unit = UnitFor(max_bytes);
  const double y_max = static_cast<double>(max_bytes) / unit.divisor * 1.08;

  QValueAxis* ax = axis_x_;
  ax->setRange(first - 0.5, last + 0.5);
  ax->setLabelFormat(QStringLiteral("%d"));
  ax->setTitleText(QStringLiteral("schedule step"));
  ax->setTickType(QValueAxis::TicksDynamic);
  ax->setTickAnchor(0);
  // About one tick label per 110 pixels, so that labels are never elided ("...").
  tick_width_ = width();
  const int ticks = std::clamp(width() / 110, 3, 10);
  ax->setTickInterval(NiceStep(static_cast<double>(last - first + 1) / ticks));
  QValueAxis* ay = axis_y_;
  ay->setRange(0, y_max);
  ay->setTickCount(5);  // the axis is kept: applyNiceNumbers' count from the last data stays
  ay->applyNiceNumbers();
  const double y_top = ay->max();
  ay->setLabelFormat(FormatAxisLabel(y_top));
  ay->setTitleText(QStringLiteral("memory alive (%1)").arg(unit.name));
  auto attach = [&](QAbstractSeries* s) {
    c->addSeries(s);
    s->attachAxis(ax);
    s->attachAxis(ay);
  };

  // Phases shaded: one area per phase kind, rectangles over its runs of steps.
  const TimelineData* phase_source = primary_ ? primary_.get() : nullptr;
  if (!phase_source) {
    for (const Overlay& o : overlays_)
      if (o.data && static_cast<int64_t>(o.data->size()) == n) {
        phase_source = o.data.get();
        break;
      }
  }
  if (phase_source && !phase_source->phases.empty()) {
    for (Phase p :
         {Phase::kSetup, Phase::kForward, Phase::kLoss, Phase::kBackward, Phase::kRecompute,
          Phase::kOptimizer, Phase::kCommunication, Phase::kOffload, Phase::kPrefetch}) {
      auto* upper = new QLineSeries;
      int64_t i = first;
      while (i <= last) {
        if (phase_source->phases[i] != p) {
          ++i;
          continue;
        }
        int64_t j = i;
        while (j + 1 <= last && phase_source->phases[j + 1] == p) ++j;
        upper->append(i - 0.5, 0);
        upper->append(i - 0.5, y_top);
        upper->append(j + 0.5, y_top);
        upper->append(j + 0.5, 0);
        i = j + 1;
      }
      if (upper->count() == 0) {
        delete upper;
        continue;
      }
      auto* area = new QAreaSeries(upper);
      upper->setParent(area);
      area->setName(QString::fromLatin1(PhaseName(p)));
      area->setBrush(PhaseColor(p));
      area->setPen(Qt::NoPen);
      attach(area);
      // The one-step phases need no legend entry.
      if (compact_legend_ || p == Phase::kSetup || p == Phase::kLoss || p == Phase::kOptimizer ||
          p == Phase::kCommunication || p == Phase::kOffload || p == Phase::kPrefetch) {
        for (QLegendMarker* m : c->legend()->markers(area)) m->setVisible(false);
      }
    }
  }

  if (primary_) {
    std::vector<int64_t> slice(primary_->bytes.begin() + first, primary_->bytes.begin() + last + 1);
    std::vector<size_t> idx = DownsampleIndices(slice, max_points_);
    for (size_t& k : idx) k += first;
    plotted_points_ += idx.size();
    if (primary_->has_categories()) {
      std::vector<int64_t> below(idx.size(), 0);
      QLineSeries* previous = nullptr;
      for (MemoryCategory cat : kStackOrder) {
        const int ci = static_cast<int>(cat);
        bool any = false;
        for (size_t k : idx)
          if (primary_->by_category[k][ci] != 0) {
            any = true;
            break;
          }
        if (!any) continue;
        auto* upper = new QLineSeries;
        QList<QPointF> pts;
        pts.reserve(idx.size());
        for (size_t k = 0; k < idx.size(); ++k) {
          below[k] += primary_->by_category[idx[k]][ci];
          pts.append(
              QPointF(static_cast<double>(idx[k]), static_cast<double>(below[k]) / unit.divisor));
        }
        upper->replace(pts);
        QLineSeries* lower = nullptr;
        if (previous) {
          lower = new QLineSeries;
          lower->replace(previous->points());
        }
        auto* area = new QAreaSeries(upper, lower);
        upper->setParent(area);
        if (lower) lower->setParent(area);
        QColor color = CategoryColor(cat);
        area->setName(CategoryLabel(cat));
        area->setBrush(color);
        area->setPen(QPen(color.darker(130), 1));
        attach(area);
        if (compact_legend_)
          for (QLegendMarker* m : c->legend()->markers(area)) m->setVisible(false);
        previous = upper;
      }
      for (int64_t b : below) plotted_peak_ = std::max(plotted_peak_, static_cast<double>(b));
    } else {
      auto* upper = new QLineSeries;
      QList<QPointF> pts;
      pts.reserve(idx.size());
      for (size_t k : idx) {
        pts.append(QPointF(static_cast<double>(k),
                           static_cast<double>(primary_->bytes[k]) / unit.divisor));
        plotted_peak_ = std::max(plotted_peak_, static_cast<double>(primary_->bytes[k]));
      }
      upper->replace(pts);
      auto* area = new QAreaSeries(upper);
      upper->setParent(area);
      QColor color(0x4e, 0x79, 0xa7);
      area->setName(QStringLiteral("total (per-category data needs the model)"));
      color.setAlpha(200);
      area->setBrush(color);
      area->setPen(QPen(color.darker(130), 1));
      attach(area);
    }
    // The peak, marked.
    if (primary_->peak_step >= first && primary_->peak_step <= last) {
      auto* peak = new QScatterSeries;
      peak->setName(QStringLiteral("peak %1").arg(BytesQ(primary_->peak_bytes)));
      peak->setMarkerSize(9);
      peak->setColor(Qt::black);
      peak->setBorderColor(Qt::white);
      peak->append(static_cast<double>(primary_->peak_step),
                   static_cast<double>(primary_->peak_bytes) / unit.divisor);
      attach(peak);
    }
  }

  // Predicted for a GPU: the caching allocator model's reserved bytes over the same steps,
  // a kind of memory of its own beside the allocated stack.
  if (primary_ && static_cast<int64_t>(primary_->reserved.size()) == n) {
    std::vector<int64_t> slice(primary_->reserved.begin() + first,
                               primary_->reserved.begin() + last + 1);
    std::vector<size_t> idx = DownsampleIndices(slice, max_points_);
    auto* line = new QLineSeries;
    QList<QPointF> pts;
    for (size_t k : idx)
      pts.append(
          QPointF(static_cast<double>(k + first), static_cast<double>(slice[k]) / unit.divisor));
    line->replace(pts);
    plotted_points_ += pts.size();
    line->setName(
        QStringLiteral("reserved, predicted · peak %1").arg(BytesQ(primary_->reserved_peak_bytes)));
    line->setPen(QPen(ReservedColor(), 2, Qt::DashDotLine));
    attach(line);
  }

  // Offload plans: the pinned host memory, a kind of memory of its own (never in the device's
  // stack), on the same byte axis.
  if (primary_ && static_cast<int64_t>(primary_->host_bytes.size()) == n) {
    std::vector<int64_t> slice(primary_->host_bytes.begin() + first,
                               primary_->host_bytes.begin() + last + 1);
    std::vector<size_t> idx = DownsampleIndices(slice, max_points_);
    auto* line = new QLineSeries;
    QList<QPointF> pts;
    int64_t host_peak = 0;
    for (size_t k : idx) {
      pts.append(
          QPointF(static_cast<double>(k + first), static_cast<double>(slice[k]) / unit.divisor));
      plotted_host_peak_ = std::max(plotted_host_peak_, static_cast<double>(slice[k]));
    }
    for (int64_t b : primary_->host_bytes) host_peak = std::max(host_peak, b);
    line->replace(pts);
    plotted_points_ += pts.size();
    line->setName(QStringLiteral("pinned host memory · peak %1").arg(BytesQ(host_peak)));
    line->setPen(QPen(HostColor(), 2, Qt::DashLine));
    attach(line);
  }

  for (const Overlay& o : overlays_) {
    if (!o.data || o.data->size() == 0) continue;
    const size_t m = o.data->size();
    // The overlay's own indices that fall in the visible range.
    size_t lo = 0, hi = m - 1;
    while (lo < m && Stretch(lo, m, n) < first - 1) ++lo;
    while (hi > lo && Stretch(hi, m, n) > last + 1) --hi;
    if (lo >= m) continue;
    std::vector<int64_t> slice(o.data->bytes.begin() + lo, o.data->bytes.begin() + hi + 1);
    std::vector<size_t> idx = DownsampleIndices(slice, max_points_);
    auto* line = new QLineSeries;
    QList<QPointF> pts;
    for (size_t k : idx) {
      size_t i = k + lo;
      pts.append(QPointF(Stretch(i, m, n), static_cast<double>(o.data->bytes[i]) / unit.divisor));
    }
    line->replace(pts);
    plotted_points_ += pts.size();
    QString label = o.label;
    if (static_cast<int64_t>(m) != n) label += QStringLiteral(" (stretched)");
    line->setName(QStringLiteral("%1 · peak %2").arg(label, BytesQ(o.data->peak_bytes)));
    line->setPen(QPen(o.color, 2));
    attach(line);
  }

  for (const Mark& m : marks_) {
    if (m.bytes < 0) continue;
    auto* line = new QLineSeries;
    line->append(first - 0.5, static_cast<double>(m.bytes) / unit.divisor);
    line->append(last + 0.5, static_cast<double>(m.bytes) / unit.divisor);
    line->setName(QStringLiteral("%1 %2").arg(m.label, BytesQ(m.bytes)));
    line->setPen(QPen(m.color, 1.5, Qt::DotLine));
    attach(line);
  }

  if (budget_ >= 0) {
    auto* line = new QLineSeries;
    line->append(first - 0.5, static_cast<double>(budget_) / unit.divisor);
    line->append(last + 0.5, static_cast<double>(budget_) / unit.divisor);
    line->setName(QStringLiteral("budget %1").arg(BytesQ(budget_)));
    QPen pen(QColor(0xc0, 0x10, 0x10), 2, Qt::DashLine);
    line->setPen(pen);
    attach(line);
  }
}

int64_t TimelineChart::stepAt(const QPoint& viewport_pos) const {
  const int64_t n = steps();
  if (n == 0 || chart()->series().isEmpty()) return -1;
  QPointF scene = mapToScene(viewport_pos);
  QPointF v = chart()->mapToValue(chart()->mapFromScene(scene));
  if (!std::isfinite(v.x())) return -1;
  int64_t s = static_cast<int64_t>(std::llround(v.x()));
  return std::clamp<int64_t>(s, first_, last_ < 0 ? n - 1 : last_);
}

QString TimelineChart::describeStep(int64_t step) const {
  QStringList lines;
  const int64_t n = steps();
  if (step < 0 || step >= n) return {};
  if (primary_) {
    const TimelineData& t = *primary_;
    lines << QStringLiteral("<b>step %1</b> of %2 · %3")
                 .arg(step)
                 .arg(n)
                 .arg(QString::fromLatin1(PhaseName(t.phases[step])));
    lines << Q(t.events[step]).toHtmlEscaped();
    lines << QStringLiteral("alive: <b>%1</b>%2")
                 .arg(BytesQ(t.bytes[step]),
                      step == t.peak_step ? QStringLiteral(" (peak)") : QString());
    if (step < static_cast<int64_t>(t.host_bytes.size()))
      lines << QStringLiteral("pinned host memory: %1").arg(BytesQ(t.host_bytes[step]));
    if (t.has_categories()) {
      std::vector<std::pair<int64_t, MemoryCategory>> parts;
      for (MemoryCategory c : kStackOrder) {
        int64_t b = t.by_category[step][static_cast<int>(c)];
        if (b > 0) parts.push_back({b, c});
      }
      std::sort(parts.begin(), parts.end(), [](auto& a, auto& b) { return a.first > b.first; });
      for (auto& [b, c] : parts) {
        lines << QStringLiteral("&nbsp;&nbsp;<span style='color:%1'>&#9632;</span> %2: %3")
                     .arg(CategoryColor(c).name(), CategoryLabel(c), BytesQ(b));
      }
    }
    if (t.reserved.size() == t.size())
      lines << QStringLiteral("reserved, predicted: <b>%1</b>").arg(BytesQ(t.reserved[step]));
  }
  for (const Overlay& o : overlays_) {
    if (!o.data || o.data->size() == 0) continue;
    const size_t m = o.data->size();
    size_t i =
        m == static_cast<size_t>(n) || n <= 1
            ? static_cast<size_t>(step)
            : static_cast<size_t>(std::llround(static_cast<double>(step) * (m - 1) / (n - 1)));
    if (i >= m) continue;
    QString what =
        primary_ ? QString() : QStringLiteral(" · ") + Q(o.data->events[i]).toHtmlEscaped();
    lines << QStringLiteral("<span style='color:%1'>%2</span>: <b>%3</b>%4")
                 .arg(o.color.name(), o.label.toHtmlEscaped(), BytesQ(o.data->bytes[i]), what);
  }
  for (const Mark& m : marks_)
    if (m.bytes >= 0) lines << QStringLiteral("%1: %2").arg(m.label, BytesQ(m.bytes));
  if (budget_ >= 0) lines << QStringLiteral("budget: %1").arg(BytesQ(budget_));
  return lines.join(QStringLiteral("<br>"));
}

void TimelineChart::mousePressEvent(QMouseEvent* e) {
  if (e->button() == Qt::LeftButton) {
    press_pos_ = e->pos();
    dragging_ = true;
    rubber_->setGeometry(QRect(press_pos_, QSize(1, 1)));
    rubber_->show();
    e->accept();
    return;
  }
  if (e->button() == Qt::RightButton) {
    resetRange();
    e->accept();
    return;
  }
  QChartView::mousePressEvent(e);
}

void TimelineChart::mouseMoveEvent(QMouseEvent* e) {
  if (dragging_) {
    QRectF plot = chart()->plotArea();
    QPoint top = mapFromScene(chart()->mapToScene(plot.topLeft()));
    QPoint bottom = mapFromScene(chart()->mapToScene(plot.bottomRight()));
    rubber_->setGeometry(QRect(QPoint(std::min(press_pos_.x(), e->pos().x()), top.y()),
                               QPoint(std::max(press_pos_.x(), e->pos().x()), bottom.y())));
    e->accept();
    return;
  }
  QRectF plot = chart()->plotArea();
  QPointF in_chart = chart()->mapFromScene(mapToScene(e->pos()));
  if (plot.contains(in_chart)) {
    int64_t step = stepAt(e->pos());
    QString text = describeStep(step);
    if (!text.isEmpty()) QToolTip::showText(e->globalPosition().toPoint(), text, this);
  } else {
    QToolTip::hideText();
  }
  QChartView::mouseMoveEvent(e);
}

void TimelineChart::mouseReleaseEvent(QMouseEvent* e) {
  if (e->button() == Qt::LeftButton && dragging_) {
    dragging_ = false;
    rubber_->hide();
    if (std::abs(e->pos().x() - press_pos_.x()) < 5) {
      int64_t step = stepAt(e->pos());
      if (step >= 0) emit stepClicked(step);
    } else {
      int64_t a = stepAt(QPoint(std::min(press_pos_.x(), e->pos().x()), e->pos().y()));
      int64_t b = stepAt(QPoint(std::max(press_pos_.x(), e->pos().x()), e->pos().y()));
      if (a >= 0 && b >= 0) setRange(a, b);
    }
    e->accept();
    return;
  }
  QChartView::mouseReleaseEvent(e);
}

void TimelineChart::mouseDoubleClickEvent(QMouseEvent* e) {
  resetRange();
  e->accept();
}

namespace {
constexpr int kLaneHeight = 18;
constexpr int kLaneTop = 20;  // the title
}  // namespace

LinkLanes::LinkLanes(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setAutoFillBackground(true);
  QPalette p = palette();
  p.setColor(QPalette::Window, Qt::white);
  setPalette(p);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

QSize LinkLanes::sizeHint() const { return QSize(600, kLaneTop + 2 * kLaneHeight + 6); }

void LinkLanes::setCopies(std::vector<LinkCopy> copies, const QString& title) {
  copies_ = std::move(copies);
  title_ = title;
  update();
}

void LinkLanes::setRange(int64_t first, int64_t last) {
  first_ = first;
  last_ = last;
  update();
}

void LinkLanes::setPlotArea(double left, double right) {
  left_ = left;
  right_ = right;
  update();
}

int LinkLanes::bars() const {
  int n = 0;
  for (const LinkCopy& c : copies_) n += !barRect(c).isNull();
  return n;
}

// The chart plots step i centred on i: a copy's step positions (i + the fraction passed) sit
// half a step to the left on its axis.
QRectF LinkLanes::barRect(const LinkCopy& c) const {
  const double lo = first_ - 0.5, hi = last_ + 0.5;
  const double a = std::max(c.begin_step - 0.5, lo), b = std::min(c.end_step - 0.5, hi);
  if (b < a || right_ <= left_ || hi <= lo) return {};
  auto x = [&](double v) { return left_ + (v - lo) / (hi - lo) * (right_ - left_); };
  const double y = kLaneTop + (c.to_host ? 0 : kLaneHeight) + 2;
  return QRectF(x(a), y, std::max(2.0, x(b) - x(a)), kLaneHeight - 4);
}

void LinkLanes::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  p.setPen(Qt::black);
  p.drawText(QRectF(left_, 2, std::max(0.0, width() - left_), kLaneTop - 4),
             Qt::AlignLeft | Qt::AlignVCenter, title_);
  for (int lane = 0; lane < 2; ++lane) {
    const QRectF band(left_, kLaneTop + lane * kLaneHeight, std::max(0.0, right_ - left_),
                      kLaneHeight);
    p.fillRect(band, lane ? QColor(0, 0, 0, 12) : QColor(0, 0, 0, 6));
    p.setPen(Qt::black);
    p.drawText(QRectF(0, band.top(), std::max(0.0, left_ - 6), kLaneHeight),
               Qt::AlignRight | Qt::AlignVCenter,
               lane ? QStringLiteral("→ device") : QStringLiteral("→ host"));
  }
  for (const LinkCopy& c : copies_) {
    const QRectF r = barRect(c);
    if (r.isNull()) continue;
    const QColor color = c.to_host ? HostColor() : PrefetchColor();
    p.fillRect(r, color);
    p.setPen(QPen(color.darker(140), 1));
    p.drawRect(r);
  }
}

QString LinkLanes::describeCopy(const LinkCopy& c) const {
  return QStringLiteral(
             "<b>%1</b> %2<br>%3 · %4–%5 s on its copy stream<br>started at step %6, "
             "waited for at step %7")
      .arg(c.to_host ? QStringLiteral("offload") : QStringLiteral("prefetch"),
           Q(c.name).toHtmlEscaped(), BytesQ(c.bytes))
      .arg(c.begin_seconds, 0, 'g', 4)
      .arg(c.end_seconds, 0, 'g', 4)
      .arg(c.start_step)
      .arg(c.wait_step);
}

void LinkLanes::mouseMoveEvent(QMouseEvent* e) {
  for (const LinkCopy& c : copies_) {
    const QRectF r = barRect(c);
    if (r.isNull() || !r.adjusted(-1, -1, 1, 1).contains(e->position())) continue;
    QToolTip::showText(e->globalPosition().toPoint(), describeCopy(c), this);
    return;
  }
  QToolTip::hideText();
}

}  // namespace memplan::gui
