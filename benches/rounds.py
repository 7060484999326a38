"""Shared by the bench summaries: a measure's median over repeated rounds with its range, and a
ratio that is printed only when its rounds agree (when the range of the per-round ratios is
wider than the distance of their median from 1, the line says the difference is not
measurable instead)."""
import statistics


def spread(values, digits=1):
    """The median of values with their range, to `digits` decimals."""
    return f"{statistics.median(values):,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def ratio_line(name, per_round):
    """A ratio from per-round ratios: its median and range, or why it is not printed."""
    if not per_round:
        return f"| {name} | - | no rounds |"
    med, low, high = statistics.median(per_round), min(per_round), max(per_round)
    if len(per_round) > 1 and (high - low) > abs(med - 1.0):
        return f"| {name} | not measurable | rounds gave {low:.2f}-{high:.2f}, wider than the effect |"
    return f"| {name} | {med:.2f} | {low:.2f}-{high:.2f} in {len(per_round)} rounds |"
