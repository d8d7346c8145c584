#include "storage_model.h"

#include <QStringList>

#include "common.h"

namespace memplan::gui {

QString StorageDecisionText(const StorageDecision& d) {
  return d.recomputed  ? RecomputedText(d.recompute_count())
         : d.offloaded ? QStringLiteral("offloaded")
                       : QStringLiteral("kept");
}

StorageModel::StorageModel(QObject* parent)
    : RowTableModel({QStringLiteral("Tensor"), QStringLiteral("Bytes"), QStringLiteral("Decision"),
                     QStringLiteral("Forward (steps)"), QStringLiteral("Recomputed (steps)")},
                    parent) {}

Cell StorageModel::cell(const StorageDecision& row, int column) const {
  switch (column) {
    case kTensor: {
      Cell c = TextCell(Q(row.name));
      c.tooltip = Q(row.name);
      return c;
    }
    case kBytes:
      return NumberCell(BytesQ(row.bytes), static_cast<double>(row.bytes));
    case kDecision: {
      Cell c = TextCell(StorageDecisionText(row));
      c.sort = row.recomputed ? 1 + row.recompute_count() : 0;
      if (row.recomputed) {
        c.color = SelectiveColor();
        c.tooltip =
            row.saved
                ? QStringLiteral(
                      "dropped after its last forward reader; recomputed before the backward step "
                      "that reads it, held until its last saver's backward")
                : QStringLiteral(
                      "no backward op saves it: dropped so that the recomputations reading it "
                      "recompute it too, instead of keeping it alive until then");
      } else if (row.offloaded) {
        c.sort = -1;
        c.color = HostColor();
        c.tooltip = QStringLiteral(
            "copied to pinned host memory after its last forward reader, prefetched back before "
            "the backward that reads it");
      } else {
        c.tooltip = QStringLiteral("saved from the forward until its last saver's backward");
      }
      return c;
    }
    case kForward:
      return NumberCell(QStringLiteral("%1–%2").arg(row.forward_begin).arg(row.forward_end),
                        row.forward_begin);
    case kRecomputed: {
      QStringList spans;
      for (const auto& [begin, end] : row.recompute_spans)
        spans << QStringLiteral("%1–%2").arg(begin).arg(end);
      Cell c =
          TextCell(spans.isEmpty() ? QStringLiteral("\u2014") : spans.join(QStringLiteral(", ")));
      // Sorted by the first recompute's step (an integer: the list reads left-aligned).
      c.sort = QVariant::fromValue<qint64>(
          row.recompute_spans.empty() ? -1 : row.recompute_spans.front().first);
      return c;
    }
  }
  return {};
}

}  // namespace memplan::gui
