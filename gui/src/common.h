// Small helpers shared by the dashboard's widgets: colors, text, units.
#pragma once

#include <QColor>
#include <QString>
#include <string>

#include "document.h"

namespace memplan::gui {

inline QString Q(const std::string& s) { return QString::fromStdString(s); }
inline QString BytesQ(int64_t bytes) { return Q(BytesText(bytes)); }

// Stacking order in charts: persistent memory at the bottom.
inline constexpr MemoryCategory kStackOrder[] = {
    MemoryCategory::kParameter,  MemoryCategory::kGradient,   MemoryCategory::kOptimizerState,
    MemoryCategory::kInput,      MemoryCategory::kConstant,   MemoryCategory::kActivation,
    MemoryCategory::kSavedExtra, MemoryCategory::kActivationGradient, MemoryCategory::kTemporary,
};

inline QColor CategoryColor(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kParameter: return QColor(0x4e, 0x79, 0xa7);
    case MemoryCategory::kGradient: return QColor(0x76, 0xb7, 0xb2);
    case MemoryCategory::kOptimizerState: return QColor(0x59, 0xa1, 0x4f);
    case MemoryCategory::kInput: return QColor(0xb0, 0x7a, 0xa1);
    case MemoryCategory::kConstant: return QColor(0xba, 0xb0, 0xac);
    case MemoryCategory::kActivation: return QColor(0xf2, 0x8e, 0x2b);
    case MemoryCategory::kSavedExtra: return QColor(0xed, 0xc9, 0x48);
    case MemoryCategory::kActivationGradient: return QColor(0xe1, 0x57, 0x59);
    case MemoryCategory::kTemporary: return QColor(0x9c, 0x75, 0x5f);
    case MemoryCategory::kCount: break;
  }
  return Qt::gray;
}

inline QString CategoryLabel(MemoryCategory c) {
  QString s = QString::fromLatin1(MemoryCategoryName(c));
  s.replace('_', ' ');
  return s;
}

inline QColor PhaseColor(Phase p) {
  switch (p) {
    case Phase::kSetup: return QColor(0xee, 0xee, 0xee);
    case Phase::kForward: return QColor(0xe3, 0xee, 0xfa);
    case Phase::kLoss: return QColor(0xee, 0xe3, 0xfa);
    case Phase::kBackward: return QColor(0xfb, 0xee, 0xdf);
    case Phase::kRecompute: return QColor(0xfa, 0xd4, 0xd4);
    case Phase::kOptimizer: return QColor(0xe0, 0xf3, 0xe0);
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
