"""Pure arithmetic of time-sharing measurements: throughput over a window
from progress lines, targets from limits and weights, errors in points."""

from typing import Dict, List, Optional, Sequence, Tuple

Point = Tuple[float, float]  # (monotonic seconds, completed units)


def progress_points(messages: Sequence[dict]) -> List[Point]:
    return sorted((float(m["t"]), float(m["n"])) for m in messages if m.get("event") == "progress")


def count_at(points: Sequence[Point], t: float) -> Optional[float]:
    """Completed units at time t, linearly interpolated; None outside the data."""
    if not points or t < points[0][0] or t > points[-1][0]:
        return None
    for (t0, n0), (t1, n1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return n0 if t1 == t0 else n0 + (n1 - n0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def rate(points: Sequence[Point], t0: float, t1: float) -> Optional[float]:
    """Units per second over [t0, t1]; None when the progress does not cover it."""
    if t1 <= t0:
        return None
    a, b = count_at(points, t0), count_at(points, t1)
    if a is None or b is None:
        return None
    return (b - a) / (t1 - t0)


def burst_targets(weights: Dict[str, float]) -> Dict[str, float]:
    """Busy burst tenants split the GPU by weight."""
    total = float(sum(weights.values()))
    return {k: w / total for k, w in weights.items()}


def capped_targets(limits_pct: Dict[str, float]) -> Dict[str, float]:
    """Busy capped tenants each get their cap when the caps fit in 100 %."""
    total = sum(limits_pct.values())
    scale = 1.0 if total <= 100 else 100.0 / total
    return {k: v * scale / 100.0 for k, v in limits_pct.items()}


def error_points(achieved: Optional[float], target: float) -> Optional[float]:
    return None if achieved is None else round((achieved - target) * 100.0, 2)


def within(achieved: Optional[float], target: float, tolerance_points: float) -> Optional[bool]:
    e = error_points(achieved, target)
    return None if e is None else abs(e) <= tolerance_points


def ratio(with_shim: Optional[float], without: Optional[float]) -> Optional[float]:
    if with_shim is None or not without:
        return None
    return with_shim / without


def median(values: Sequence[float]) -> Optional[float]:
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2.0
