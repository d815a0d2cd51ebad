"""A displayed matplotlib figure's data as E2B's `e2b/chart` (the SDK's `Result.chart`), in the
shape e2b_code_interpreter's charts.py reads: a line, scatter, bar, pie or box-and-whisker chart of
the figure's one Axes, a "superchart" of several, or "unknown" (the type only) for anything else.

Imported by interpreter_kernel.py in each kernel; `figure_chart` runs only when a Figure is
displayed (plt.show(), or a figure as a cell's value), on the figure as matplotlib holds it. It
reads matplotlib's public API only (what each Axes holds, its axes' converters, locators and
formatters, a bar container's own orientation and values), so no draw is needed, and it never
raises: a figure it cannot read has no chart. Numbers are plain floats (NaN and infinities as
None), dates ISO text, points pairs, so the chart is JSON.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

# "Time (s)" or "Distance [m]": the unit E2B's charts give beside a label
UNIT = re.compile(r"\s\((.*?)\)|\[(.*?)\]")
HIDDEN_LABEL = re.compile(r"_(?:child|container)(\d+)")  # matplotlib's names for unlabelled artists
NON_LINEAR = ("log", "symlog", "logit", "function", "functionlog", "asinh")


def figure_chart(figure: Any) -> dict[str, Any] | None:
    """The figure's chart, or None (no Axes, or one it cannot read)."""
    try:
        axes = figure.get_axes()
        if not axes or (len(axes) == 1 and not _holds(axes[0])):  # nothing drawn: no chart
            return None
        if len(axes) == 1:
            return axes_chart(axes[0])
        suptitle = getattr(figure, "_suptitle", None)  # Figure.get_suptitle() is matplotlib 3.8's
        return {"type": "superchart", "title": (suptitle.get_text() if suptitle is not None else "") or None,
                "elements": [axes_chart(ax) for ax in axes]}
    except Exception:  # a figure this does not know how to read: the PNG still goes
        return None


def axes_chart(ax: Any) -> dict[str, Any]:
    kind = chart_type(ax)
    if kind in ("line", "scatter"):
        return _points(ax, kind)
    if kind == "bar":
        return _bars(ax)
    if kind == "pie":
        return {"type": "pie", "title": _title(ax), "elements": [
            {"label": str(w.get_label()), "angle": round(abs(w.theta2 - w.theta1), 4), "radius": _number(w.r)}
            for w in ax.patches]}
    if kind == "box_and_whisker":
        return _boxes(ax)
    return {"type": "unknown", "title": _title(ax), "elements": []}


def _holds(ax: Any) -> list[Any]:
    """What is drawn on the Axes, its texts aside."""
    return [*ax.lines, *ax.patches, *ax.collections, *ax.images, *ax.tables, *ax.artists]


def chart_type(ax: Any) -> str:
    """By what the Axes holds (its texts aside), as E2B tells them apart: only lines, boxes with
    their lines, points, wedges or bars; a reference line (axhline, axvline) counts for nothing
    beside points, wedges or bars."""
    from matplotlib.collections import PathCollection  # type: ignore[import-not-found]
    from matplotlib.lines import Line2D  # type: ignore[import-not-found]
    from matplotlib.patches import PathPatch, Rectangle, Wedge  # type: ignore[import-not-found]

    held = _holds(ax)
    if all(isinstance(a, Line2D) for a in held):
        return "line"
    if all(isinstance(a, (PathPatch, Line2D)) for a in held):
        return "box_and_whisker"
    held = [a for a in held if not (isinstance(a, Line2D) and _reference_line(ax, a))]
    for kind, cls in (("scatter", PathCollection), ("pie", Wedge), ("bar", Rectangle)):
        if all(isinstance(a, cls) for a in held):
            return kind
    return "unknown"


def _reference_line(ax: Any, line: Any) -> bool:
    """An axhline/axvline: two points drawn across the Axes, not in data coordinates."""
    return len(line.get_xdata()) == 2 and line.get_transform() is not ax.transData


# --- what every chart has ---------------------------------------------------------------------------

def _title(ax: Any) -> str | None:
    return ax.get_title() or None


def _unit(label: str | None) -> str | None:
    found = UNIT.search(label) if label else None
    return (found.group(1) or found.group(2)) if found else None


def _planar(ax: Any, kind: str, swap: bool = False) -> dict[str, Any]:
    """Title, axis labels and their units; `swap`: the category axis is y (horizontal bars and
    boxes), so it is named x, as E2B's charts name it."""
    x, y = ax.get_xlabel() or None, ax.get_ylabel() or None
    if swap:
        x, y = y, x
    return {"type": kind, "title": _title(ax), "x_label": x, "y_label": y, "x_unit": _unit(x), "y_unit": _unit(y)}


def _number(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def _value(value: Any) -> Any:
    """A data value as JSON: a number, a date's ISO text, or the category's text."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if type(value).__name__ == "datetime64":  # numpy's, without importing numpy for it
        return str(value.astype("datetime64[s]"))
    if isinstance(value, str):
        return value
    try:
        return _number(value)
    except (TypeError, ValueError):
        return str(value)


def _values(data: Any) -> list[Any]:
    """A sequence of data values as JSON: numbers through numpy at once (a line of 100,000 points
    costs milliseconds), anything else one by one."""
    import numpy as np  # type: ignore[import-not-found]

    array = np.asarray(data)
    if array.dtype.kind not in "biuf":
        return [_value(v) for v in data]
    numbers = array.astype(float)
    if bool(np.isfinite(numbers).all()):
        return list(numbers.tolist())
    return [v if math.isfinite(v) else None for v in numbers.tolist()]


def _is_dates(axis: Any) -> bool:
    import matplotlib.dates as mdates  # type: ignore[import-not-found]

    converter = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
    kinds = tuple(getattr(mdates, name) for name in ("DateConverter", "ConciseDateConverter", "_SwitchableDateConverter")
                  if hasattr(mdates, name))
    return isinstance(converter, kinds) or isinstance(axis.get_major_locator(), mdates.DateLocator)


def _scale(axis: Any, scale: str) -> str:
    import matplotlib.category as mcategory  # type: ignore[import-not-found]

    if _is_dates(axis):
        return "datetime"
    if scale in NON_LINEAR:
        return scale
    converter = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
    if isinstance(converter, mcategory.StrCategoryConverter):
        return "categorical"
    return "linear" if scale == "linear" else "unknown"


def _ticks(axis: Any) -> tuple[list[Any], list[str]]:
    """The major ticks (dates as ISO text) and their labels as the axis would draw them."""
    import matplotlib.dates as mdates

    locs = list(axis.get_majorticklocs())
    labels = [str(t) for t in axis.get_major_formatter().format_ticks(locs)]
    if _is_dates(axis):
        return [mdates.num2date(t).isoformat() for t in locs], labels
    return [_number(t) for t in locs], labels


def _label_at(axis: Any, position: float) -> str:
    """The category axis' label for a bar or box at `position`: the tick there, if there is one."""
    locs = list(axis.get_majorticklocs())
    labels = axis.get_major_formatter().format_ticks(locs)
    for loc, label in zip(locs, labels, strict=True):
        if math.isclose(loc, position, rel_tol=1e-9, abs_tol=1e-9):
            return str(label)
    if _is_dates(axis):
        import matplotlib.dates as mdates

        return str(mdates.num2date(position).isoformat())
    return f"{position:g}"


def _name(label: Any, kind: str) -> str:
    """An artist's label; matplotlib's own name for an unlabelled one becomes E2B's "Line 0"."""
    found = HIDDEN_LABEL.fullmatch(str(label))
    return f"{kind} {found.group(1)}" if found else str(label)


# --- by kind ---------------------------------------------------------------------------------------

def _points(ax: Any, kind: str) -> dict[str, Any]:
    chart = _planar(ax, kind)
    for name, axis, scale in (("x", ax.xaxis, ax.get_xscale()), ("y", ax.yaxis, ax.get_yscale())):
        chart[f"{name}_ticks"], chart[f"{name}_tick_labels"] = _ticks(axis)
        chart[f"{name}_scale"] = _scale(axis, scale)
    if kind == "line":
        chart["elements"] = [{"label": _name(line.get_label(), "Line"),
                              "points": list(zip(_values(line.get_xdata()), _values(line.get_ydata()), strict=False))}
                             for line in ax.lines if not _reference_line(ax, line)]
    else:
        chart["elements"] = [{"label": str(c.get_label()),
                              "points": list(zip(_values(c.get_offsets()[:, 0]), _values(c.get_offsets()[:, 1]), strict=True))}
                             for c in ax.collections]
    return chart


def _bars(ax: Any) -> dict[str, Any]:
    """Each bar of each container (a `bar`/`barh` call: a group), its value the data's own (a
    stacked bar's is its own height, not its top)."""
    from matplotlib.container import BarContainer  # type: ignore[import-not-found]

    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    horizontal = bool(containers) and all(c.orientation == "horizontal" for c in containers)
    chart = _planar(ax, "bar", swap=horizontal)
    elements = []
    for container in containers:
        group = _name(container.get_label(), "Group")
        sideways = container.orientation == "horizontal"
        axis = ax.yaxis if sideways else ax.xaxis
        values = container.datavalues if container.datavalues is not None else \
            [r.get_width() if sideways else r.get_height() for r in container.patches]
        for rect, value in zip(container.patches, values, strict=False):
            middle = rect.get_y() + rect.get_height() / 2 if sideways else rect.get_x() + rect.get_width() / 2
            elements.append({"label": _label_at(axis, middle), "group": group, "value": _number(value)})
    chart["elements"] = elements
    return chart


def _close(a: float, b: float, span: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=max(span, 1.0) * 1e-9)


def _boxes(ax: Any) -> dict[str, Any]:
    """A `boxplot(..., patch_artist=True)`: each box (first to third quartile) with its median,
    whiskers (min and max) and fliers (outliers), read back from the box's patch and the lines
    drawn on it. Vertical boxes stand on the x axis; horizontal ones lie on the y axis."""
    from matplotlib.patches import PathPatch

    boxes = []
    for patch in ax.patches:
        if not isinstance(patch, PathPatch):
            continue
        vertices = patch.get_path().vertices
        boxes.append((float(vertices[:, 0].min()), float(vertices[:, 0].max()),
                      float(vertices[:, 1].min()), float(vertices[:, 1].max())))
    lines = [(list(map(float, line.get_xdata())), list(map(float, line.get_ydata())), line) for line in ax.lines]

    def median_is_flat(x0: float, x1: float, y0: float, y1: float) -> bool | None:
        """Whether the box's median is a horizontal line (a vertical box); None if none is seen."""
        for xs, ys, _ in lines:
            if len(xs) == 2 and ys[0] == ys[1] and min(xs) >= x0 and max(xs) <= x1 and y0 <= ys[0] <= y1 and xs[0] != xs[1]:
                return True
            if len(xs) == 2 and xs[0] == xs[1] and min(ys) >= y0 and max(ys) <= y1 and x0 <= xs[0] <= x1 and ys[0] != ys[1]:
                return False
        return None

    flat = [median_is_flat(*box) for box in boxes]
    vertical = not any(f is False for f in flat)
    chart = _planar(ax, "box_and_whisker", swap=not vertical)
    axis = ax.xaxis if vertical else ax.yaxis
    elements = []
    for x0, x1, y0, y1 in boxes:
        p0, p1, q1, q3 = (x0, x1, y0, y1) if vertical else (y0, y1, x0, x1)
        span = q3 - q1
        box: dict[str, Any] = {"label": _label_at(axis, (p0 + p1) / 2), "min": q1, "first_quartile": q1,
                               "median": None, "third_quartile": q3, "max": q3, "outliers": []}
        for xs, ys, line in lines:
            ps, vs = (xs, ys) if vertical else (ys, xs)
            if not ps or not all(p0 - 1e-9 <= p <= p1 + 1e-9 for p in ps):
                continue
            if line.get_linestyle() in ("None", "none", "", " "):  # fliers: markers only
                box["outliers"].extend(v for v in vs if math.isfinite(v))
            elif len(vs) == 2 and vs[0] == vs[1] and q1 <= vs[0] <= q3 and ps[0] != ps[1]:
                box["median"] = vs[0]
            elif len(vs) == 2 and ps[0] == ps[1]:  # a whisker, from the box's edge outwards
                if _close(max(vs), q1, span):
                    box["min"] = min(vs)
                elif _close(min(vs), q3, span):
                    box["max"] = max(vs)
        elements.append({k: ([_number(v) for v in val] if k == "outliers" else
                             _number(val) if isinstance(val, float) else val) for k, val in box.items()})
    chart["elements"] = elements
    return chart
