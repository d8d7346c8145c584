// Small helpers shared by the dashboard's widgets: colors, text, units.
#pragma once

#include <QColor>
#include <QString>
#include <string>

#include "document.h"

namespace memplan::gui {

inline QString Q(const std::string& s) { return QString::fromStdString(s); }
inline QString BytesQ(int64_t bytes) { return Q(BytesText(bytes)); }

inline QString FlopsText(double f) {
  if (f < 0) return QStringLiteral("\u2014");
  return QString::number(f, 'e', 2);
}

inline QString SecondsText(double s) {
  if (s < 0) return QStringLiteral("\u2014");
  if (s < 1) return QStringLiteral("%1 ms").arg(s * 1000, 0, 'f', 1);
  return QStringLiteral("%1 s").arg(s, 0, 'f', 2);
}

// Durations of ops and steps: "12.3 µs", "4.56 ms", "1.234 s"; "—" for unknown (negative).
inline QString DurationText(double s) {
  if (s < 0) return QStringLiteral("\u2014");
  if (s == 0) return QStringLiteral("0");
  if (s < 1e-3) return QStringLiteral("%1 µs").arg(s * 1e6, 0, 'f', 1);
  if (s < 1) return QStringLiteral("%1 ms").arg(s * 1e3, 0, 'f', 2);
  return QStringLiteral("%1 s").arg(s, 0, 'f', 3);
}

// "+1.20 ms (+3.4%)": b against a; "—" when either is unknown (negative).
inline QString SignedDuration(double a, double b, bool with_percent = true) {
  if (a < 0 || b < 0) return QStringLiteral("\u2014");
  const double d = b - a;
  QString s = (d < 0 ? QStringLiteral("−") : QStringLiteral("+")) + DurationText(d < 0 ? -d : d);
  if (with_percent && a > 0)
    s += QStringLiteral(" (%1%2%)").arg(d < 0 ? "" : "+").arg(100.0 * d / a, 0, 'f', 1);
  return s;
}

// "+1.2 MiB (+3.4%)": b against a.
inline QString SignedBytes(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return QStringLiteral("\u2014");
  int64_t d = b - a;
  QString s = (d < 0 ? QStringLiteral("−") : QStringLiteral("+")) + BytesQ(d < 0 ? -d : d);
  if (a > 0) s += QStringLiteral(" (%1%2%)").arg(d < 0 ? "" : "+").arg(100.0 * d / a, 0, 'f', 1);
  return s;
}

// "resnet18.onnx (model)", "plan.json (plan) · sqrt": how lists and legends name an item.
inline QString ItemLabel(const Item& item) {
  QString label =
      QStringLiteral("%1 (%2)").arg(Q(item.title), QString::fromLatin1(SourceKindName(item.kind)));
  if (item.kind == SourceKind::kPlan && !item.strategy.empty())
    label += QStringLiteral(" · ") + Q(item.strategy);
  return label;
}

// A selective plan's decision for a storage it drops: "recomputed (3 times)".
inline QString RecomputedText(int times) {
  if (times <= 0) return QStringLiteral("dropped, never recomputed");
  return times == 1 ? QStringLiteral("recomputed (1 time)")
                    : QStringLiteral("recomputed (%1 times)").arg(times);
}

// Stacking order in charts: persistent memory at the bottom.
inline constexpr MemoryCategory kStackOrder[] = {
    MemoryCategory::kParameter,  MemoryCategory::kGradient,   MemoryCategory::kOptimizerState,
    MemoryCategory::kInput,      MemoryCategory::kConstant,   MemoryCategory::kWorkspace,
    MemoryCategory::kActivation, MemoryCategory::kSavedExtra, MemoryCategory::kActivationGradient,
    MemoryCategory::kTemporary,
};

inline QColor CategoryColor(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kParameter:
      return QColor(0x4e, 0x79, 0xa7);
    case MemoryCategory::kGradient:
      return QColor(0x76, 0xb7, 0xb2);
    case MemoryCategory::kOptimizerState:
      return QColor(0x59, 0xa1, 0x4f);
    case MemoryCategory::kInput:
      return QColor(0xb0, 0x7a, 0xa1);
    case MemoryCategory::kConstant:
      return QColor(0xba, 0xb0, 0xac);
    case MemoryCategory::kActivation:
      return QColor(0xf2, 0x8e, 0x2b);
    case MemoryCategory::kSavedExtra:
      return QColor(0xed, 0xc9, 0x48);
    case MemoryCategory::kActivationGradient:
      return QColor(0xe1, 0x57, 0x59);
    case MemoryCategory::kTemporary:
      return QColor(0x9c, 0x75, 0x5f);
    case MemoryCategory::kWorkspace:
      return QColor(0x79, 0x70, 0x6e);
    case MemoryCategory::kCount:
      break;
  }
  return Qt::gray;
}

inline QString CategoryLabel(MemoryCategory c) {
  QString s = QString::fromLatin1(MemoryCategoryName(c));
  s.replace('_', ' ');
  return s;
}

// Series colors of the time views, and of a profile's memory over a predicted timeline.
inline QColor MeasuredColor() { return QColor(0x1f, 0x1f, 0x1f); }
inline QColor ProfileOverlayColor() { return QColor(0xd6, 0x27, 0x28); }
inline QColor PredictedColor() { return QColor(0x4e, 0x79, 0xa7); }
// Selective recompute: a dropped storage's spans in the lifetimes, the selective Pareto series.
// The caching allocator's reserved memory (its segments), predicted or measured.
inline QColor ReservedColor() { return QColor(0x8c, 0x56, 0x4b); }
// The device memory CUPTI saw (cudaMalloc).
inline QColor DeviceMemoryColor() { return QColor(0x17, 0xbe, 0xcf); }
inline QColor SelectiveColor() { return QColor(0x7b, 0x3f, 0xa6); }
// Pinned host memory (offload): the host spans, the host series, the device-to-host lane.
inline QColor HostColor() { return QColor(0x2c, 0x9c, 0x6a); }
// The host-to-device copies (prefetch) on the link.
inline QColor PrefetchColor() { return QColor(0xe0, 0x8a, 0x1e); }

inline QColor PhaseColor(Phase p) {
  switch (p) {
    case Phase::kSetup:
      return QColor(0xee, 0xee, 0xee);
    case Phase::kForward:
      return QColor(0xe3, 0xee, 0xfa);
    case Phase::kLoss:
      return QColor(0xee, 0xe3, 0xfa);
    case Phase::kBackward:
      return QColor(0xfb, 0xee, 0xdf);
    case Phase::kRecompute:
      return QColor(0xfa, 0xd4, 0xd4);
    case Phase::kOptimizer:
      return QColor(0xe0, 0xf3, 0xe0);
    case Phase::kCommunication:
      return QColor(0xf3, 0xf0, 0xd0);
    // Host copies: device to host after the forward use, host to device before the backward's.
    case Phase::kOffload:
      return QColor(0xd4, 0xec, 0xec);
    case Phase::kPrefetch:
      return QColor(0xd4, 0xe4, 0xf4);
  }
  return Qt::white;
}

// A power-of-two unit for axes, so that bytes / unit is exact in floating point.
struct ByteUnit {
  double divisor = 1;
  QString name = QStringLiteral("B");
};
inline ByteUnit UnitFor(int64_t max_bytes) {
  if (max_bytes >= (int64_t{1} << 30)) return {double(int64_t{1} << 30), QStringLiteral("GiB")};
  if (max_bytes >= (int64_t{1} << 20)) return {double(int64_t{1} << 20), QStringLiteral("MiB")};
  if (max_bytes >= (int64_t{1} << 10)) return {double(int64_t{1} << 10), QStringLiteral("KiB")};
  return {};
}

}  // namespace memplan::gui
