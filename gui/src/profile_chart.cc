#include "profile_chart.h"

#include <QChart>
#include <QLegendMarker>
#include <QLineSeries>
#include <QScatterSeries>
#include <QValueAxis>
#include <algorithm>

#include "common.h"
#include "pages/page_util.h"

namespace memplan::gui {

ProfileMemoryChart::ProfileMemoryChart(QWidget* parent) : QChartView(new QChart(), parent) {
  setRenderHint(QPainter::Antialiasing);
  chart()->legend()->setAlignment(Qt::AlignRight);
  chart()->setMargins(QMargins(4, 4, 4, 4));
  chart()->setAnimationOptions(QChart::NoAnimation);
  setMinimumSize(400, 260);
  rebuild();
}

void ProfileMemoryChart::setLines(std::vector<ProfileLine> lines, const QString& title) {
  lines_ = std::move(lines);
  title_ = title;
  rebuild();
}

void ProfileMemoryChart::setMaxPoints(size_t max_points) {
  max_points_ = std::max<size_t>(16, max_points);
  rebuild();
}

void ProfileMemoryChart::rebuild() {
  QChart* c = chart();
  ClearChart(c);
  plotted_peak_ = 0;
  plotted_points_ = 0;
  c->setTitle(title_);
  int64_t max_bytes = 1;
  double max_seconds = 0;
  for (const ProfileLine& l : lines_) {
    if (!l.profile) continue;
    max_bytes = std::max({max_bytes, l.profile->peak_bytes, l.profile->start_bytes});
    max_seconds = std::max(max_seconds, l.profile->step_seconds);
    for (const MemoryEvent& e : l.profile->memory_events)
      max_seconds = std::max(max_seconds, e.time);
  }
  if (lines_.empty()) return;
  const ByteUnit unit = UnitFor(max_bytes);
  const bool ms = max_seconds < 2;
  const double time_scale = ms ? 1e3 : 1;
  auto* ax = new QValueAxis;
  ax->setRange(0, std::max(max_seconds * time_scale, 1e-3));
  ax->applyNiceNumbers();
  ax->setTitleText(ms ? QStringLiteral("time from the start of the step (ms)")
                      : QStringLiteral("time from the start of the step (s)"));
  ax->setLabelFormat(QStringLiteral("%g"));
  auto* ay = new QValueAxis;
  ay->setRange(0, static_cast<double>(max_bytes) / unit.divisor * 1.08);
  ay->applyNiceNumbers();
  ay->setLabelFormat(ay->max() < 10 ? QStringLiteral("%.1f") : QStringLiteral("%.0f"));
  ay->setTitleText(QStringLiteral("memory alive (%1)").arg(unit.name));
  c->addAxis(ax, Qt::AlignBottom);
  c->addAxis(ay, Qt::AlignLeft);
  for (const ProfileLine& l : lines_) {
    if (!l.profile) continue;
    const Profile& p = *l.profile;
    std::vector<int64_t> values;
    values.reserve(p.memory_events.size());
    for (const MemoryEvent& e : p.memory_events) values.push_back(e.bytes_after);
    // A step line: each event moves the level at its time.
    auto* line = new QLineSeries;
    QList<QPointF> pts;
    double level = static_cast<double>(p.start_bytes) / unit.divisor;
    pts.append(QPointF(0, level));
    plotted_peak_ = std::max(plotted_peak_, static_cast<double>(p.start_bytes));
    for (size_t i : DownsampleIndices(values, max_points_)) {
      const MemoryEvent& e = p.memory_events[i];
      const double x = e.time * time_scale, y = static_cast<double>(e.bytes_after) / unit.divisor;
      pts.append(QPointF(x, level));
      pts.append(QPointF(x, y));
      level = y;
      plotted_peak_ = std::max(plotted_peak_, static_cast<double>(e.bytes_after));
    }
    pts.append(QPointF(std::max(p.step_seconds * time_scale, pts.back().x()), level));
    line->replace(pts);
    plotted_points_ += pts.size();
    line->setName(QStringLiteral("%1 · peak %2 · step %3")
                      .arg(l.label, BytesQ(p.peak_bytes), DurationText(p.step_seconds)));
    line->setPen(QPen(l.color, 1.5));
    c->addSeries(line);
    line->attachAxis(ax);
    line->attachAxis(ay);
    auto* peak = new QScatterSeries;
    peak->setMarkerSize(9);
    peak->setColor(l.color);
    peak->setBorderColor(Qt::white);
    peak->append(p.peak_time * time_scale, static_cast<double>(p.peak_bytes) / unit.divisor);
    c->addSeries(peak);
    peak->attachAxis(ax);
    peak->attachAxis(ay);
    for (QLegendMarker* m : c->legend()->markers(peak)) m->setVisible(false);
  }
}

}  // namespace memplan::gui
